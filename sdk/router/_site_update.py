"""A member's real router update: local router training on its own pairs (stage B).

The production path is :func:`local_router_update` on a :class:`SiteRound`: the consortium's
:class:`~sdk.wire.ConsortiumRouterConfig` (fetched from the server, pinned by the round's
hash), the member's roster name (its head index) and its own pairs folder. A client app runs it
when its ``client.toml`` has a ``[router_training]`` section; custom update code registers a
function of the same signature in the ``fedmor.router_updates`` entry-point group
(:func:`load_router_update`). The pairs never leave the process; only the trained flat
parameters phi_k and n_k go into the secure-aggregation round (the ``router_secagg`` kind masks
``n_k * phi_k`` and ``n_k`` and publishes the weighted mean).

A :class:`RouterUpdateSpec` records a whole federation's stage B (the declared router and
each site's pairs) for an audit's replay of a demo run (``router/spec.json``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sdk.router._encoder import EncodedBatch
from sdk.router._evaluation import encode_pairs
from sdk.router._federated import FederatedConfig
from sdk.router._hashing_encoder import HashingEncoder, HashingEncoderConfig
from sdk.router._local import (
    LocalRouterUpdate,
    LocalTrainingConfig,
    router_loss,
    train_router_locally,
)
from sdk.router._model import Router, RouterConfig
from sdk.wire import ROUTER_ROUND_PARAM, ConsortiumRouterConfig, RoundInfo
from sdk.wire._router_config import default_federated_config

__all__ = [
    "ROUTER_UPDATES_GROUP",
    "RouterUpdateError",
    "RouterUpdateSpec",
    "SiteData",
    "SiteRound",
    "load_router_update",
    "local_router_update",
]

ROUTER_UPDATES_GROUP = "fedmor.router_updates"
"""The entry-point group of custom router updates: ``NAME = "module:function"``, the function
taking a :class:`SiteRound` and returning ``(phi_k, n_k)``, or a ``LocalRouterUpdate`` as
:func:`local_router_update` does (then the member also sees its local loss)."""


class RouterUpdateError(ValueError):
    """A router update that cannot run: an unknown plug-in, a member without a head, or a
    round whose parameters or length do not fit the configuration.

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


@dataclass(frozen=True)
class SiteRound:
    """What a member's router update gets for one round: the consortium's configuration (its
    hash checked against the round's), the member's roster name, the round and its base router
    (None in a lineage's first round), and the member's own training pairs folder."""

    config: ConsortiumRouterConfig
    name: str
    info: RoundInfo
    base: np.ndarray | None
    pairs_dir: Path

    @property
    def head_index(self) -> int:
        """This member's router output (its place in ``config.heads``)."""
        try:
            return self.config.head_index(self.name)
        except ValueError as exc:
            raise RouterUpdateError(str(exc)) from None

    @property
    def router_round(self) -> int:
        """The round's place in the federation's schedule (0 when the operator gave none)."""
        return _router_round(self.info)


SiteUpdateFn = Callable[[SiteRound], "tuple[np.ndarray, int] | LocalRouterUpdate"]

# Encoding is the costly part and the pairs do not change between rounds: once per process.
_ENCODED: dict[tuple[str, str, int | None], tuple[EncodedBatch, int]] = {}


def _encoded(encoder: HashingEncoderConfig, pairs_dir: Path,
             max_pairs: int | None) -> tuple[EncodedBatch, int]:
    """Both responses of the first ``max_pairs`` pairs in ``pairs_dir``, encoded; their count."""
    key = (encoder.model_dump_json(), str(pairs_dir), max_pairs)
    if key not in _ENCODED:
        from sdk.data import load_pairs

        pairs = load_pairs(pairs_dir)[:max_pairs]
        _ENCODED[key] = encode_pairs(HashingEncoder(encoder), pairs), len(pairs)
    return _ENCODED[key]


def _train(router: Router, info: RoundInfo, base: np.ndarray | None, encoded: EncodedBatch,
           index: int, federated: FederatedConfig) -> LocalRouterUpdate:
    """``router`` (from ``base``) trained locally for head ``index``: phi_k (P,) float32 and
    the mean loss on ``encoded`` before and after."""
    if router.num_params() != info.vector_length:
        raise RouterUpdateError(f"round {info.round_id} expects {info.vector_length} parameters, "
                                f"the router configuration gives {router.num_params()}")
    if base is not None:
        router.set_flat_params(base)
    before = router_loss(router, encoded, index)
    update = train_router_locally(router, encoded, index,
                                  federated.local_config(_router_round(info), index))
    router.set_flat_params(update.params)
    return LocalRouterUpdate(params=update.params.astype(np.float32),
                             num_samples=update.num_samples, loss=update.loss,
                             loss_before=before, loss_after=router_loss(router, encoded, index))


def local_router_update(job: SiteRound) -> LocalRouterUpdate:
    """The built-in update: phi_k (P,) float32 after local training from ``job.base`` on the
    member's pairs with the consortium's recipe, ``num_samples`` = n_k = local pairs used,
    and the router's mean local loss before and after (what the member's log and ``fedmor
    client status`` show)."""
    config = job.config
    encoded, n_pairs = _encoded(config.encoder, job.pairs_dir, config.max_pairs)
    encoder_id = HashingEncoder(config.encoder).encoder_id
    router = Router(config.router, config.heads, encoder_id)
    update = _train(router, job.info, job.base, encoded, job.head_index, config.federated)
    return dataclasses.replace(update, num_samples=n_pairs)


def load_router_update(name: str) -> SiteUpdateFn:
    """The update named ``name``: ``builtin`` (:func:`local_router_update`) or an entry point
    of the ``fedmor.router_updates`` group; ``RouterUpdateError`` naming the registered ones."""
    if name == "builtin":
        return local_router_update
    found = entry_points(group=ROUTER_UPDATES_GROUP, name=name)
    if not found:
        known = sorted(e.name for e in entry_points(group=ROUTER_UPDATES_GROUP))
        raise RouterUpdateError(f"no router update {name!r} in the {ROUTER_UPDATES_GROUP} "
                                f"entry-point group (registered: {', '.join(known) or 'none'}; "
                                f"builtin is always there)")
    loaded = next(iter(found)).load()
    if not callable(loaded):
        raise RouterUpdateError(f"router update {name!r} ({ROUTER_UPDATES_GROUP}) is not callable")
    return loaded  # type: ignore[no-any-return]


def _router_round(info: RoundInfo) -> int:
    """The round's place in the federation's schedule (0 when the coordinator gave none)."""
    value = info.params.get(ROUTER_ROUND_PARAM, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RouterUpdateError(f"round {info.round_id}: params.{ROUTER_ROUND_PARAM} must be an "
                                f"integer >= 0, got {value!r}")
    return value
