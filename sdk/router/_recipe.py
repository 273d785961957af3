"""Federated router training from the clients' preference pairs, in one call.

The recipe the ``fedmor router`` command, the benchmarks and the demo's simulation share, so
that the hyper-parameters that work on label-skewed clients live in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sdk.router._aggregators import AGGREGATORS, Aggregator
from sdk.router._encoder import Encoder
from sdk.router._federated import (
    FederatedConfig,
    FederatedRouterTrainer,
    RoundStats,
    RouterClient,
)
from sdk.router._model import Router, RouterConfig
from sdk.wire._router_config import default_federated_config

__all__ = ["default_federated_config", "load_router_clients", "train_federated_router"]


def load_router_clients(
    data_dir: str | Path,
    client_ids: Sequence[str],
    encoder: Encoder,
    *,
    pairs_per_client: int | None = None,
) -> list[RouterClient]:
    """Encode both responses of each client's ``data_dir/clients/<id>/train`` pairs."""
    from sdk.data import load_pairs

    root = Path(data_dir)
    clients = []
    for client_id in client_ids:
        pairs = load_pairs(root / "clients" / client_id / "train")
        clients.append(RouterClient.from_pairs(client_id, pairs[:pairs_per_client], encoder,
                                               client_ids))
    return clients


def train_federated_router(
    clients: Sequence[RouterClient],
    encoder: Encoder,
    *,
    aggregation: str | Aggregator = "secure",
    config: FederatedConfig | None = None,
    num_layers: int = 2,
    seed: int = 0,
    log: Callable[[str], None] | None = print,
) -> tuple[Router, list[RoundStats]]:
    """Train a fresh router over ``clients`` with ``secure`` (SecAgg+) or ``plain`` FedAvg, or
    with a configured ``Aggregator`` (e.g. a ``SecureAggregator`` with client-level DP)."""
    if isinstance(aggregation, str) and aggregation not in AGGREGATORS:
        raise ValueError(f"aggregation must be one of {sorted(AGGREGATORS)}, got {aggregation!r}")
    ids = [c.client_id for c in clients]
    router = Router(RouterConfig(input_dim=encoder.dim, num_layers=num_layers, seed=seed), ids,
                    encoder.encoder_id)
    trainer = FederatedRouterTrainer(
        router, clients, config or default_federated_config(seed=seed),
        AGGREGATORS[aggregation]() if isinstance(aggregation, str) else aggregation,
        log=log,
    )
    return router, trainer.run()
