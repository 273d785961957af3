"""Federated router training: client sampling, local training, then an :class:`Aggregator`
(secure or plain FedAvg, ``sdk.router._aggregators``) forms the next global router."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sdk.router._aggregators import FLOAT_BYTES, Aggregator, SecureAggregator
from sdk.router._encoder import EncodedBatch, Encoder
from sdk.router._errors import RouterError, RouterMismatchError, RouterShapeError
from sdk.router._evaluation import encode_pairs
from sdk.router._local import LocalRouterUpdate, LocalTrainingConfig, train_router_locally
from sdk.router._model import Router
from sdk.secagg import Stage
from sdk.wire._router_config import FederatedConfig

if TYPE_CHECKING:
    from sdk.reward import PairLike

__all__ = [
    "DropoutSchedule",
    "FederatedConfig",
    "FederatedRouterTrainer",
    "RoundStats",
    "RouterClient",
]

# round index -> protocol stage -> ids of the clients whose reply at that stage never arrives.
DropoutSchedule = Mapping[int, Mapping[Stage, Collection[str]]]
"""Per round, per SecAgg stage: the clients that drop out there (for simulations)."""


@dataclass
class RouterClient:
    """One client of the federation as the trainer sees it (an in-process object).

    ``client_ids`` is the federation's client list as this client was enrolled with it (K and the
    head row order); ``encoder_id`` names the public encoder that produced ``data``. Every row of
    ``data`` is one local response (chosen and rejected of each pair).
    """

    client_id: str
    data: EncodedBatch
    encoder_id: str
    client_ids: tuple[str, ...]

    @classmethod
    def from_pairs(
        cls, client_id: str, pairs: Sequence[PairLike], encoder: Encoder, client_ids: Sequence[str]
    ) -> RouterClient:
        """A client whose data are both responses of each of its local preference pairs."""
        return cls(client_id, encode_pairs(encoder, pairs), encoder.encoder_id, tuple(client_ids))

    @property
    def num_samples(self) -> int:
        """n_k, the weight of this client's update."""
        return len(self.data)

    def local_update(
        self, router: Router, client_index: int, config: LocalTrainingConfig
    ) -> LocalRouterUpdate:
        """Train a copy of the global router on the local data (override for custom clients)."""
        return train_router_locally(router, self.data, client_index, config)


@dataclass(frozen=True)
class RoundStats:
    """What one round did (all of it is known to the server, except ``mean_loss``)."""

    round: int
    sampled: list[str]
    survivors: list[str]
    dropped: list[str]
    weight_sum: int
    mean_loss: float
    bytes_up: int
    bytes_down: int
    aborted: str | None
    epsilon: float | None


@dataclass
class FederatedRouterTrainer:
    """Rounds of: sample clients, train each locally on the global router, aggregate, update."""

    router: Router
    clients: Sequence[RouterClient]
    config: FederatedConfig = field(default_factory=FederatedConfig)
    aggregator: Aggregator = field(default_factory=SecureAggregator)
    log: Callable[[str], None] | None = print
    history: list[RoundStats] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_id = {c.client_id: c for c in self.clients}
        self._check_clients()
        n = len(self.clients)
        per = self.config.per_round(n)
        if per < self.aggregator.min_participants:
            raise RouterError(
                f"{self.aggregator.name} aggregation needs >= {self.aggregator.min_participants} "
                f"clients per round, the schedule samples {per} of {n}"
            )
        self.aggregator.bind(self.router.client_ids, rounds=self.config.rounds, sample_rate=per / n)

    def _check_clients(self) -> None:
        r = self.router
        if len(self._by_id) != len(self.clients):
            raise RouterMismatchError(
                f"duplicate client ids: {[c.client_id for c in self.clients]}"
            )
        for c in self.clients:
            if c.client_id not in r.client_ids:
                raise RouterMismatchError(
                    f"client {c.client_id!r} is not in the router's clients {r.client_ids}"
                )
            if c.encoder_id != r.encoder_id:
                raise RouterMismatchError(
                    f"client {c.client_id!r} encodes with {c.encoder_id!r}, the router expects {r.encoder_id!r}"
                )
            if list(c.client_ids) != r.client_ids:
                raise RouterMismatchError(
                    f"client {c.client_id!r} expects K={len(c.client_ids)} clients {list(c.client_ids)}, "
                    f"the router has K={r.num_clients} {r.client_ids}"
                )
            d = int(c.data.hidden.shape[2])
            if d != r.config.input_dim:
                raise RouterShapeError(
                    f"client {c.client_id!r} data has feature size D={d}, the router expects {r.config.input_dim}"
                )
            if c.num_samples == 0:
                raise RouterShapeError(f"client {c.client_id!r} has no local samples")

    def _sample(self, round_index: int) -> list[str]:
        ids = [c.client_id for c in self.clients]
        per = self.config.per_round(len(ids))
        rng = np.random.default_rng([self.config.seed, round_index])
        picked = rng.choice(len(ids), size=per, replace=False)
        return [ids[i] for i in sorted(picked)]

    def run_round(
        self, round_index: int, dropouts: Mapping[Stage, Collection[str]] | None = None
    ) -> RoundStats:
        """Run round ``round_index``; an aborted round leaves the global router unchanged."""
        sampled = self._sample(round_index)
        global_params = self.router.get_flat_params()  # (P,)
        updates: dict[str, LocalRouterUpdate] = {}
        for c in sampled:
            k = self.router.client_ids.index(c)
            u = self._by_id[c].local_update(self.router, k, self.config.local_config(round_index, k))
            if u.params.shape != global_params.shape:
                raise RouterShapeError(
                    f"update from client {c!r} has shape {u.params.shape}, expected {global_params.shape}"
                )
            updates[c] = u
        agg = self.aggregator.aggregate(round_index, global_params, updates, dropouts or {})
        if agg.params is not None:
            self.router.set_flat_params(agg.params)
        # phi_t is broadcast to every sampled client before it trains.
        broadcast = len(sampled) * global_params.size * FLOAT_BYTES
        done = sum(1 for s in self.history if s.aborted is None) + (agg.aborted is None)
        stats = RoundStats(
            round=round_index,
            sampled=sampled,
            survivors=agg.survivors,
            dropped=agg.dropped,
            weight_sum=agg.weight_sum,
            mean_loss=float(np.mean([updates[c].loss for c in agg.survivors]))
            if agg.survivors
            else float("nan"),
            bytes_up=agg.bytes_up,
            bytes_down=agg.bytes_down + broadcast,
            aborted=agg.aborted,
            epsilon=self.aggregator.epsilon(done),
        )
        self.history.append(stats)
        if self.log is not None:
            self.log(_describe(stats, self.aggregator.name, self.config.rounds))
        return stats

    def run(self, dropouts: DropoutSchedule | None = None) -> list[RoundStats]:
        """Run ``config.rounds`` rounds; ``dropouts[r]`` injects the losses of round r."""
        sched = dropouts or {}
        return [self.run_round(r, sched.get(r)) for r in range(self.config.rounds)]


def _describe(s: RoundStats, name: str, rounds: int) -> str:
    status = f"ABORTED ({s.aborted})" if s.aborted else f"loss {s.mean_loss:.4f}"
    eps = "" if s.epsilon is None else f", eps {s.epsilon:.2f}"
    return (
        f"[router {name}] round {s.round + 1}/{rounds}: {len(s.survivors)}/{len(s.sampled)} clients, "
        f"{status}, up {s.bytes_up / 1e6:.3f} MB, down {s.bytes_down / 1e6:.3f} MB{eps}"
    )
