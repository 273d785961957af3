"""Aggregation strategies for federated router training, behind one interface.

``SecureAggregator`` runs the consortium's ``router_secagg`` round kind in memory
(``sdk.rounds.run_in_memory``) and counts the bytes of every message in its wire form;
``PlainAggregator`` is the unprotected ``fedavg_plain`` baseline. Both produce
``phi(t+1) = sum_k n_k phi_k / sum_k n_k`` over the clients that delivered their update.

Secure aggregation sums *deltas*: client k sends ``n_k * (phi_k - phi_t)`` and ``n_k``, and the
server forms ``phi_t + sum n_k delta_k / sum n_k``, which equals the weighted mean of the phi_k.
Deltas are small (Adam moves a parameter by about ``lr`` per step, so ``|delta| <= steps * lr``,
0.03 for 30 steps at lr 1e-3) while raw parameters are not bounded by 1 (LayerNorm gains start
at 1), so the fixed-point clip range (``SecAggConfig.clip_range``, per coordinate) holds deltas
comfortably and its resolution is spent on the values that actually change.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.rounds import (
    ROUND_KINDS,
    SecAggRoundParams,
    UpdateRejected,
    memory_spec,
    run_in_memory,
)
from sdk.router._errors import RouterError
from sdk.router._local import (
    LocalRouterUpdate,
    fedavg_plain,
)
from sdk.secagg import DPConfig, SecAggConfig, Stage
from sdk.wire import generate_key

__all__ = ["AGGREGATORS", "Aggregator", "PlainAggregator", "RoundAggregate", "SecureAggregator"]

FLOAT_BYTES = 4  # the global model and plain updates travel as float32


@dataclass(frozen=True)
class RoundAggregate:
    """An aggregator's answer: the new global parameters (None when the round aborted)."""

    params: np.ndarray | None
    survivors: list[str]
    dropped: list[str]
    weight_sum: int
    bytes_up: int
    bytes_down: int
    aborted: str | None = None


class Aggregator(ABC):
    """Turns the sampled clients' updates into the next global router parameters."""

    name: str = "abstract"
    min_participants: int = 1

    def bind(self, client_ids: Sequence[str], *, rounds: int, sample_rate: float) -> None:
        """Called once by the trainer before the first round (e.g. to enroll identities)."""
        self.client_ids = list(client_ids)

    def epsilon(self, rounds_done: int) -> float | None:
        """Client-level DP epsilon after ``rounds_done`` rounds, or None without DP."""
        return None

    @abstractmethod
    def aggregate(
        self,
        round_index: int,
        global_params: np.ndarray,
        updates: Mapping[str, LocalRouterUpdate],
        dropouts: Mapping[Stage, Collection[str]],
    ) -> RoundAggregate:
        """Aggregate ``updates`` (client id -> phi_k, n_k) of one round, minus the dropouts."""


def _lost_before_upload(dropouts: Mapping[Stage, Collection[str]]) -> set[str]:
    # The plain baseline has a single upload; a client lost at or before the stage where secure
    # aggregation collects inputs never delivered it.
    early = (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION)
    return {c for s in early for c in dropouts.get(s, ())}


class PlainAggregator(Aggregator):
    """The unprotected FedAvg baseline: the server sees every phi_k (``fedavg_plain``)."""

    name = "plain"

    def aggregate(
        self,
        round_index: int,
        global_params: np.ndarray,
        updates: Mapping[str, LocalRouterUpdate],
        dropouts: Mapping[Stage, Collection[str]],
    ) -> RoundAggregate:
        """Weighted mean of the delivered updates; bytes = float32 params + an int64 n_k each."""
        lost = _lost_before_upload(dropouts)
        alive = [c for c in updates if c not in lost]
        if not alive:
            return RoundAggregate(None, [], sorted(updates), 0, 0, 0, aborted="no client delivered")
        up = sum(updates[c].params.astype("<f4").nbytes + 8 for c in alive)
        return RoundAggregate(
            params=fedavg_plain([updates[c] for c in alive]),
            survivors=alive,
            dropped=[c for c in updates if c in lost],
            weight_sum=sum(updates[c].num_samples for c in alive),
            bytes_up=up,
            bytes_down=0,
        )


class SecureAggregator(Aggregator):
    """SecAgg+ over the router deltas: each round is a ``router_secagg`` round of the
    consortium's round kind, run by ``sdk.rounds.run_in_memory`` (the same halves, delta
    arithmetic, weight rule and id mapping as a REST round).

    ``config.clip_range`` bounds each delta coordinate, ``config.max_weight`` each n_k. With
    ``config.dp`` every client clips its delta to L2 norm C and adds its share of the noise
    (DP-FedAvg); weights become uniform (n_k = 1, ``max_weight = 1``) as ``docs/secure-aggregation.md``
    recommends, and ``dp.rounds`` / ``dp.sample_rate`` are set from the trainer's schedule.
    """

    name = "secure"
    min_participants = 2

    def __init__(self, config: SecAggConfig | None = None, *, seed: int = 0) -> None:
        self.config = SecAggRoundParams.uniform_under_dp(
            config or SecAggConfig(clip_range=1.0, max_weight=10_000))
        self.seed = seed
        self._index: dict[str, int] = {}
        self._keys: dict[str, Ed25519PrivateKey] = {}

    @property
    def dp(self) -> DPConfig | None:
        """The DP settings in force (after ``bind``), or None."""
        return self.config.dp

    def bind(self, client_ids: Sequence[str], *, rounds: int, sample_rate: float) -> None:
        """Give every client a long-term identity (the roster is distributed out of band)."""
        super().bind(client_ids, rounds=rounds, sample_rate=sample_rate)
        self._index = {c: i for i, c in enumerate(client_ids)}
        self._keys = {c: generate_key() for c in client_ids}
        if self.config.dp is not None:
            dp = self.config.dp.model_copy(update={"rounds": rounds, "sample_rate": sample_rate})
            self.config = self.config.model_copy(update={"dp": dp})

    def epsilon(self, rounds_done: int) -> float | None:
        """Epsilon from the opacus RDP accountant after ``rounds_done`` rounds."""
        return (
            None
            if self.config.dp is None or rounds_done == 0
            else self.config.dp.epsilon(rounds_done)
        )

    def aggregate(
        self,
        round_index: int,
        global_params: np.ndarray,
        updates: Mapping[str, LocalRouterUpdate],
        dropouts: Mapping[Stage, Collection[str]],
    ) -> RoundAggregate:
        """One SecAgg+ round in memory; lost messages are the dropouts of ``dropouts``."""
        if not self._index:
            raise RouterError("SecureAggregator.bind() must run before aggregate()")
        clients = [c for c in self.client_ids if c in updates]  # protocol order: bind's order
        rng = np.random.default_rng([self.seed, round_index, 0x5EC])
        rng.integers(2**62)  # the draw that named the round: the graph seed stays the same
        spec = memory_spec(
            "router_secagg", {c: self._keys[c] for c in clients}, int(global_params.shape[0]),
            {**self.config.model_dump(mode="json"), "graph_seed": rng.bytes(32).hex()},
            round_id=round_index)
        try:
            res = run_in_memory(
                ROUND_KINDS["router_secagg"], spec, self._keys,
                {c: (updates[c].params, updates[c].num_samples) for c in clients}, global_params,
                dropouts={Stage(s).value: cs for s, cs in dropouts.items()},
                rngs={c: np.random.default_rng([self.seed, round_index, self._index[c]])
                      for c in clients},
            )
        except UpdateRejected as exc:
            raise RouterError(f"{exc}: raise SecAggConfig.max_weight") from exc
        if res.params is None:
            return RoundAggregate(None, [], sorted(updates), 0, res.bytes_up, res.bytes_down,
                                  aborted=res.failed)
        return RoundAggregate(
            params=res.params,
            survivors=res.survivors,
            dropped=[c for c in updates if c not in res.survivors],
            weight_sum=int(res.weight_sum),
            bytes_up=res.bytes_up,
            bytes_down=res.bytes_down,
        )


AGGREGATORS: dict[str, Callable[[], Aggregator]] = {
    "secure": SecureAggregator,
    "plain": PlainAggregator,
}
"""Aggregator factories by name: ``secure`` (SecAgg+) and ``plain`` (the unmasked baseline)."""
