"""The member's router update from its ``[router_training]`` section: the consortium's router
configuration fetched from the server and pinned by each round's hash, the member's own pairs,
and the built-in local training (or a ``fedmor.router_updates`` plug-in).
``sdk.router`` (torch) is imported only by a member that trains: a client app that only
answers reward queries, or runs the demo's stand-in, starts without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from client_app._policy import PolicyRefused
from client_app._settings import ClientSettings, RouterTrainingSettings
from sdk.wire import ConsortiumRouterConfig, RoundInfo, RouterConfigInfo

__all__ = ["ConfiguredRouterUpdate", "RoundUpdate", "UpdateFn", "check_update_name",
           "no_update", "resolve_update_fn", "unpack_update"]

REFUSAL = "router_config"
"""The refusal reason of a round whose router configuration this member cannot confirm."""


@dataclass(frozen=True)
class RoundUpdate:
    """A member's update for one round and what it tells the member: phi_k (P,) float32, n_k
    (local pairs used) and the router's mean local loss before and after the local training
    (None when the update function does not say)."""

    params: np.ndarray
    samples: int
    loss_before: float | None = None
    loss_after: float | None = None


UpdateFn = Callable[[str, RoundInfo, "np.ndarray | None"], "tuple[np.ndarray, int] | RoundUpdate"]
"""A Python update function (the demo's, or one a program hands ``ClientRunner`` or
``create_client_app``): ``(name, round, base router or None) -> (update, n_k)`` (or a
``RoundUpdate``, which also gives the local loss before and after)."""


def resolve_update_fn(settings: ClientSettings) -> UpdateFn:
    """The site's local router update when it has no ``[router_training]``: the random demo
    update (demo only); otherwise a ``ValueError`` naming the setting."""
    if not settings.demo:
        raise ValueError("no router update configured: add a [router_training] section naming "
                         "this member's training pairs (pairs_dir) to the client settings, or "
                         "run with --no-rounds; demo = true (--demo) sends random updates "
                         "instead")
    from client_app._demo import demo_update

    return demo_update


def no_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """The update function of a runner that takes part in no rounds: never called."""
    raise ValueError("this client takes part in no rounds (run_rounds = false)")


def unpack_update(out: tuple[np.ndarray, int] | RoundUpdate) -> RoundUpdate:
    """What an update function returned, as a :class:`RoundUpdate`: a Python update
    function or a plug-in may return ``(phi_k, n_k)``."""
    if isinstance(out, RoundUpdate):
        return out
    params, samples = out
    return RoundUpdate(np.asarray(params, dtype=np.float32), int(samples))


def check_update_name(name: str) -> None:
    """``ValueError`` unless ``name`` is ``builtin`` or a ``fedmor.router_updates`` plug-in."""
    from sdk.router import load_router_update

    load_router_update(name)


class ConfiguredRouterUpdate:
    """The update function of a member with ``[router_training]``. ``fetch`` returns the
    server's signed ``GET /v1/router/config``; a round is taken only when its
    configuration hash is the one this member recomputed from the fetched configuration."""

    def __init__(self, training: RouterTrainingSettings, fetch: Callable[[], RouterConfigInfo]) -> None:
        from sdk.router import load_router_update

        self.training = training
        self._fetch = fetch
        self._update = load_router_update(training.update)  # an unknown plug-in: at start-up
        self._config: ConsortiumRouterConfig | None = None
        self._lock = threading.Lock()

    def _fetched(self) -> ConsortiumRouterConfig:
        served = self._fetch()
        if served.config.sha256 != served.sha256:
            raise PolicyRefused(REFUSAL, f"the server's router configuration hashes to "
                                f"{served.config.sha256[:12]}, not the {served.sha256[:12]} it "
                                f"claims")
        return served.config

    def config_for(self, info: RoundInfo) -> ConsortiumRouterConfig:
        """The configuration round ``info`` trains, fetched again when its hash is new;
        ``PolicyRefused`` when the round names none, or one the server does not serve."""
        ref = info.router_config
        if ref is None:
            raise PolicyRefused(REFUSAL, f"round {info.round_id} names no router configuration "
                                f"(the server declares none): this member trains only the "
                                f"consortium's declared router")
        with self._lock:
            if self._config is None or self._config.sha256 != ref.sha256:
                self._config = self._fetched()
            config = self._config
        if config.sha256 != ref.sha256:
            raise PolicyRefused(REFUSAL, f"round {info.round_id} names router configuration "
                                f"{ref.sha256[:12]} (lineage {ref.lineage}), the server serves "
                                f"{config.describe()}")
        if config.num_params != info.vector_length:
            raise PolicyRefused(REFUSAL, f"round {info.round_id} has length "
                                f"{info.vector_length}, its {config.describe()}")
        return config

    def __call__(self, name: str, info: RoundInfo, base: np.ndarray | None) -> RoundUpdate:
        """phi_k (P,) float32 trained on this member's pairs, n_k = local pairs used, and the
        local loss before and after when the update gives them (the built-in one does)."""
        from sdk.router import SiteRound

        job = SiteRound(config=self.config_for(info), name=name, info=info, base=base,
                        pairs_dir=self.training.pairs_dir)
        out = self._update(job)
        if isinstance(out, tuple):  # a plug-in's (phi_k, n_k)
            return unpack_update(out)
        # the built-in update's LocalRouterUpdate
        return RoundUpdate(np.asarray(out.params, dtype=np.float32), int(out.num_samples),
                           out.loss_before, out.loss_after)
