"""A member's real router update: local router training on its own pairs (stage B).

A client app points ``update_source`` at ``client_app._router_update:router_update``, which
calls :func:`router_update`. The function reads a
:class:`RouterUpdateSpec` (JSON) from the path in ``$FEDMOR_ROUTER_SPEC``: the public encoder and
router configuration shared by the federation, and, per roster name, the client's router index
and its local pairs directory. The pairs never leave the process; only the trained flat
parameters phi_k and n_k go into the secure-aggregation round (the ``router_secagg`` kind masks
``n_k * phi_k`` and ``n_k`` and publishes the weighted mean).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sdk.router._encoder import EncodedBatch
from sdk.router._evaluation import encode_pairs
from sdk.router._federated import FederatedConfig
from sdk.router._hashing_encoder import HashingEncoder, HashingEncoderConfig
from sdk.router._local import LocalTrainingConfig, train_router_locally
from sdk.router._model import Router, RouterConfig
from sdk.router._recipe import default_federated_config
from sdk.wire import ROUTER_ROUND_PARAM, RoundInfo

__all__ = [
    "ROUTER_SPEC_ENV",
    "RouterUpdateError",
    "RouterUpdateSpec",
    "SiteData",
    "router_update",
]

ROUTER_SPEC_ENV = "FEDMOR_ROUTER_SPEC"
"""The environment variable naming the member's ``RouterUpdateSpec`` JSON file."""


class RouterUpdateError(ValueError):
    """The router-update spec is missing, does not name this client, or mismatches the round.

    A ``ValueError``: the client runner then abandons the round (it becomes a dropout) instead
    of stopping."""


class SiteData(BaseModel):
    """One client's place in the router (output index) and its local pairs directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    pairs_dir: Path


class RouterUpdateSpec(BaseModel):
    """Public federation settings plus each site's private data path (read locally only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    encoder: HashingEncoderConfig = HashingEncoderConfig()
    router: RouterConfig = RouterConfig()
    client_ids: list[str] = Field(min_length=1, description="router outputs, in order")
    federated: FederatedConfig = Field(
        default_factory=default_federated_config,
        description="the local recipe and its lr schedule over the rounds (the round index "
        "comes with each round, as params.router_round)",
    )
    max_pairs: int | None = Field(default=None, ge=1, description="local pairs used per round")
    sites: dict[str, SiteData] = Field(default_factory=dict, description="roster name -> data")

    def build_router(self) -> Router:
        """The deterministic initial router (same on every client: seeded by ``router.seed``)."""
        encoder_id = HashingEncoder(self.encoder).encoder_id
        return Router(self.router, self.client_ids, encoder_id)

    def local_config(self, router_round: int, site_index: int) -> LocalTrainingConfig:
        """What site ``site_index`` trains with in the federation's round ``router_round``."""
        return self.federated.local_config(router_round, site_index)


# Encoding is the costly part and the pairs do not change between rounds: once per process.
_CACHE: dict[tuple[str, str], tuple[RouterUpdateSpec, EncodedBatch, int]] = {}


def _load(name: str) -> tuple[RouterUpdateSpec, EncodedBatch, int]:
    path = os.environ.get(ROUTER_SPEC_ENV)
    if not path:
        raise RouterUpdateError(f"${ROUTER_SPEC_ENV} is not set: no router-update spec for "
                                f"{name!r}")
    key = (path, name)
    if key not in _CACHE:
        from sdk.data import load_pairs

        spec = RouterUpdateSpec.model_validate_json(Path(path).read_text())
        site = spec.sites.get(name)
        if site is None:
            raise RouterUpdateError(f"router-update spec {path} has no site {name!r} "
                                    f"(sites: {sorted(spec.sites)})")
        pairs = load_pairs(site.pairs_dir)[: spec.max_pairs]
        _CACHE[key] = spec, encode_pairs(HashingEncoder(spec.encoder), pairs), len(pairs)
    return _CACHE[key]


def _router_round(info: RoundInfo) -> int:
    """The round's place in the federation's schedule (0 when the coordinator gave none)."""
    value = info.params.get(ROUTER_ROUND_PARAM, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RouterUpdateError(f"round {info.round_id}: params.{ROUTER_ROUND_PARAM} must be an "
                                f"integer >= 0, got {value!r}")
    return value


def router_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(phi_k (P,) float32 after local training from ``base``, n_k = local pairs used).

    ``base`` None (the federation's first round) starts from the seeded initial router.
    """
    spec, encoded, n_pairs = _load(name)
    router = spec.build_router()
    if router.num_params() != info.vector_length:
        raise RouterUpdateError(f"round {info.round_id} expects {info.vector_length} parameters, "
                                f"the spec's router has {router.num_params()}")
    if base is not None:
        router.set_flat_params(base)
    index = spec.sites[name].index
    update = train_router_locally(router, encoded, index,
                                  spec.local_config(_router_round(info), index))
    return update.params.astype(np.float32), n_pairs
