"""Federated router training: client sampling, local training, secure (or plain) FedAvg.

The aggregators are strategies behind one interface (:class:`Aggregator`): ``SecureAggregator``
drives the sans-IO ``SecAggClient`` / ``SecAggServer`` objects of ``sdk.secagg`` in memory and
counts the bytes of every serialized message; ``PlainAggregator`` is the unprotected
``fedavg_plain`` baseline. Both produce ``phi(t+1) = sum_k n_k phi_k / sum_k n_k`` over the
clients that delivered their update.

Secure aggregation sums *deltas*: client k sends ``n_k * (phi_k - phi_t)`` and ``n_k``, and the
server forms ``phi_t + sum n_k delta_k / sum n_k``, which equals the weighted mean of the phi_k.
Deltas are small (Adam moves a parameter by about ``lr`` per step, so ``|delta| <= steps * lr``,
~0.03 for 30 steps at lr 1e-3) while raw parameters are not bounded by 1 (LayerNorm gains start
at 1), so the fixed-point clip range (``SecAggConfig.clip_range``, per coordinate) holds deltas
comfortably and its resolution is spent on the values that actually change.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdk.router._encoder import EncodedBatch, Encoder
from sdk.router._errors import RouterError, RouterMismatchError, RouterShapeError
from sdk.router._evaluation import PairLike, encode_pairs
from sdk.router._local import (
    LocalRouterUpdate,
    LocalTrainingConfig,
    fedavg_plain,
    train_router_locally,
)
from sdk.router._model import Router
from sdk.secagg import (
    ClientMessage,
    DPConfig,
    MaskedInput,
    Roster,
    RoundAborted,
    SecAggClient,
    SecAggConfig,
    SecAggServer,
    ServerMessage,
    Stage,
    generate_identities,
)

__all__ = [
    "AGGREGATORS",
    "Aggregator",
    "DropoutSchedule",
    "FederatedConfig",
    "FederatedRouterTrainer",
    "PlainAggregator",
    "RoundAggregate",
    "RoundStats",
    "RouterClient",
    "SecureAggregator",
]

# round index -> protocol stage -> ids of the clients whose reply at that stage never arrives.
DropoutSchedule = Mapping[int, Mapping[Stage, Collection[str]]]
_FLOAT_BYTES = 4  # the global model and plain updates travel as float32


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


def _wire_size(msg: ServerMessage | ClientMessage) -> int:
    # The masked vector travels in its binary form (4 bytes per element), the rest as JSON.
    if isinstance(msg, MaskedInput):
        return len(msg.to_bytes())
    return len(msg.model_dump_json())


class SecureAggregator(Aggregator):
    """SecAgg+ over the router deltas, through the real ``SecAggClient`` / ``SecAggServer``.

    ``config.clip_range`` bounds each delta coordinate, ``config.max_weight`` each n_k. With
    ``config.dp`` every client clips its delta to L2 norm C and adds its share of the noise
    (DP-FedAvg); weights become uniform (n_k = 1, ``max_weight = 1``) as ``docs/secure-aggregation.md``
    recommends, and ``dp.rounds`` / ``dp.sample_rate`` are set from the trainer's schedule.
    """

    name = "secure"
    min_participants = 2

    def __init__(self, config: SecAggConfig | None = None, *, seed: int = 0) -> None:
        cfg = config or SecAggConfig(clip_range=1.0, max_weight=10_000)
        if cfg.dp is not None:
            cfg = cfg.model_copy(update={"max_weight": 1})
        self.config = cfg
        self.seed = seed
        self._index: dict[str, int] = {}
        self._keys: dict[int, Ed25519PrivateKey] = {}
        self._roster = Roster({})

    @property
    def dp(self) -> DPConfig | None:
        """The DP settings in force (after ``bind``), or None."""
        return self.config.dp

    def bind(self, client_ids: Sequence[str], *, rounds: int, sample_rate: float) -> None:
        """Give every client a long-term identity (the roster is distributed out of band)."""
        super().bind(client_ids, rounds=rounds, sample_rate=sample_rate)
        self._index = {c: i for i, c in enumerate(client_ids)}
        self._keys, self._roster = generate_identities(range(len(client_ids)))
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

    def _weight(self, update: LocalRouterUpdate) -> int:
        if self.config.dp is not None:
            return 1
        if not 1 <= update.num_samples <= self.config.max_weight:
            raise RouterError(
                f"n_k={update.num_samples} outside [1, max_weight={self.config.max_weight}]: "
                "raise SecAggConfig.max_weight"
            )
        return update.num_samples

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
        ids = {self._index[c]: c for c in updates}
        rng = np.random.default_rng([self.seed, round_index, 0x5EC])
        params = self.config.round_params(
            sorted(ids),
            int(global_params.shape[0]),
            round_id=f"router-{round_index}-{rng.integers(2**62):x}",
            graph_seed=rng.bytes(32),
        )
        server = SecAggServer(params, self._roster)
        clients = {
            i: SecAggClient(
                i,
                self._keys[i],
                self._roster,
                (updates[c].params.astype(np.float64) - global_params.astype(np.float64)),
                self._weight(updates[c]),
                rng=np.random.default_rng([self.seed, round_index, i]),
            )
            for i, c in ids.items()
        }
        lost = {s: {self._index[c] for c in cs} for s, cs in dropouts.items()}
        gone: set[int] = set()
        up = down = 0
        try:
            outbox = server.start()
            while server.result is None:
                gone |= lost.get(server.stage, set())
                for i, msg in outbox.items():
                    if i in gone:
                        continue
                    down += _wire_size(msg)
                    try:
                        reply = clients[i].receive(msg)
                    except RoundAborted:
                        gone.add(i)  # too few live neighbours: this client stops
                        continue
                    up += _wire_size(reply)
                    server.receive(reply)
                outbox = server.close_stage()
        except RoundAborted as exc:
            return RoundAggregate(None, [], sorted(updates), 0, up, down, aborted=str(exc))
        res = server.result
        return RoundAggregate(
            params=(global_params.astype(np.float64) + res.mean).astype(np.float32),
            survivors=[ids[i] for i in res.survivors],
            dropped=[c for c in updates if self._index[c] not in res.survivors],
            weight_sum=res.weight_sum,
            bytes_up=up,
            bytes_down=down,
        )


AGGREGATORS: dict[str, Callable[[], Aggregator]] = {
    "secure": SecureAggregator,
    "plain": PlainAggregator,
}


class FederatedConfig(BaseModel):
    """Schedule of federated router training. Give at most one of ``clients_per_round`` and
    ``fraction``; with neither, every client takes part in every round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rounds: int = Field(default=5, ge=1)
    clients_per_round: int | None = Field(default=None, ge=1)
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    local: LocalTrainingConfig = LocalTrainingConfig()
    seed: int = 0

    @model_validator(mode="after")
    def _one_sampling_rule(self) -> FederatedConfig:
        if self.clients_per_round is not None and self.fraction is not None:
            raise ValueError("give clients_per_round or fraction, not both")
        return self

    def per_round(self, num_clients: int) -> int:
        """How many clients each round samples."""
        if self.clients_per_round is not None:
            return min(self.clients_per_round, num_clients)
        if self.fraction is not None:
            return max(1, round(self.fraction * num_clients))
        return num_clients


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
            local = self.config.local.model_copy(
                update={"seed": self.config.local.seed + 7919 * round_index + 104729 * k}
            )
            u = self._by_id[c].local_update(self.router, k, local)
            if u.params.shape != global_params.shape:
                raise RouterShapeError(
                    f"update from client {c!r} has shape {u.params.shape}, expected {global_params.shape}"
                )
            updates[c] = u
        agg = self.aggregator.aggregate(round_index, global_params, updates, dropouts or {})
        if agg.params is not None:
            self.router.set_flat_params(agg.params)
        # phi_t is broadcast to every sampled client before it trains.
        broadcast = len(sampled) * global_params.size * _FLOAT_BYTES
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
