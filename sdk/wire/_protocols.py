"""Round kinds: the server and client halves of each aggregation protocol, behind one interface.

Each kind is defined once, sans-IO, and three drivers run it: the server's round manager and
the member's runner over REST, and ``run_in_memory`` (``_memory``) in one process. The halves
speak typed messages; the REST drivers add the wire form at their edge and otherwise only move
stage payloads between these objects, persist them and enforce deadlines. A payload is a JSON object or, for bulk vectors, raw bytes (an
``application/octet-stream`` body): a kind chooses per stage, and its server half parses each
payload once, outside the round lock (``parse``), before absorbing it under the lock
(``accept``). ``rm_fedavg`` (plain weighted averaging, the baseline) lives here, ``router_secagg``
(sdk.secagg SecAgg+) in ``_secagg_kind``; ``_kinds.ROUND_KINDS`` registers both, in one place.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import Any, NamedTuple

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sdk.wire._schemas import DPTerms, RouterConfigRef

__all__ = [
    "DEMO_SAMPLES_PARAM",
    "DEMO_TRAIN_PARAM",
    "ROUTER_ROUND_PARAM",
    "UPDATE_PARAMS",
    "ClientRound",
    "FedAvgKind",
    "FedAvgParams",
    "PayloadError",
    "RoundFailed",
    "RoundKind",
    "RoundPrivacy",
    "RoundSpec",
    "ServerRound",
    "StagePayload",
    "UpdateRejected",
    "UpdateSource",
    "as_delta",
    "decode_vector",
    "encode_update",
    "encode_vector",
    "from_delta",
    "ready_update",
]


# A stage message on the wire: a JSON object, or the raw bytes of an octet-stream body.
StagePayload = dict[str, Any] | bytes
"""A stage message on the wire: a JSON object, or the raw bytes of an octet-stream body."""
# The client's local update (vector_length,) and weight n_k. The runner computes it in the
# background while a kind's input-free stages (SecAgg+'s key agreement) go ahead; a kind waits
# on it only at the stage that needs it, and gets what the local update raised, if it failed.
UpdateSource = Future[tuple[np.ndarray, float]]
"""A member's local update for a round, computed in the background: (vector, weight n_k)."""


# Round ``params`` addressed to the members' update sources, not to a round kind: a kind that
# checks its params for unknown keys passes these through.
ROUTER_ROUND_PARAM = "router_round"
"""The federation's round index (the router lr schedule's clock), read by the router update."""
DEMO_TRAIN_PARAM = "demo_train_s"
"""Seconds the demo update waits, standing in for local training elsewhere (0-60)."""
DEMO_SAMPLES_PARAM = "demo_samples"
"""The sample count n_k the demo update reports (1-1000; default: 1-10 from the name)."""
UPDATE_PARAMS = frozenset({ROUTER_ROUND_PARAM, DEMO_TRAIN_PARAM, DEMO_SAMPLES_PARAM})
"""Round ``params`` addressed to the members' update sources, not to a round kind (a kind passes
them through)."""


def as_delta(params: np.ndarray, base: np.ndarray | None) -> np.ndarray:
    """What a member sends of its trained router ``params`` (P,): the change from the round's
    ``base`` (P,), or the parameters themselves in a federation's first round (no base).

    Every router round, in-process or over REST, sums deltas: they are small (about
    ``steps * lr`` per coordinate), so one fixed-point clip range holds them, and DP clipping
    bounds how far one member moves the router, not the router's own size.
    """
    if base is None:
        return np.asarray(params, dtype=np.float32)
    if base.shape != params.shape:
        raise ValueError(f"the update has shape {params.shape}, the base router {base.shape}")
    return (np.asarray(params, dtype=np.float32) - base).astype(np.float32)


def from_delta(mean_delta: np.ndarray, base: np.ndarray | None) -> np.ndarray:
    """The next router version (P,) float32 from the weighted mean of the members' deltas."""
    out = np.asarray(mean_delta, dtype=np.float32)
    return out if base is None else (base.astype(np.float32) + out).astype(np.float32)


def ready_update(vector: np.ndarray, weight: float) -> UpdateSource:
    """An ``UpdateSource`` that is already computed."""
    out: UpdateSource = Future()
    out.set_result((vector, weight))
    return out


class PayloadError(ValueError):
    """A stage message is malformed or illegal (HTTP 422); names the stage and the reason."""


class RoundFailed(RuntimeError):
    """The round cannot finish (too few survivors, protocol abort)."""


class RoundSpec(BaseModel):
    """Everything a round was created with; persisted so the round can be rebuilt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round_id: int
    kind: str
    participants: list[str]  # client ids, in protocol order (index + 1 is the protocol id)
    public_keys: list[str]  # their Ed25519 identity keys, same order
    vector_length: int
    min_clients: int
    stage_deadline_s: float
    base_version: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    router_config: RouterConfigRef | None = None

    @classmethod
    def of(cls, info: BaseModel) -> RoundSpec:
        """The spec a round's published info (``RoundInfo``) carries: its fields of the same
        names, so the two never drift apart field by field."""
        return cls.model_validate(info.model_dump(include=set(cls.model_fields)))


class RoundPrivacy(BaseModel):
    """What a round exposes of one member's update, as its kind and params set it: what a
    member's site policy checks before it sends anything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    masked: bool = Field(description="the server learns only the sum of the survivors' updates")
    min_survivors: int = Field(ge=1, description="the fewest members whose updates an accepted "
                               "aggregate may combine (SecAgg's threshold, else min_clients)")
    dp: DPTerms | None = Field(default=None, description="each member clips its update and "
                               "adds its share of Gaussian noise")


def encode_vector(vector: np.ndarray) -> str:
    """float32 little-endian bytes, base64."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()


def decode_vector(text: object, length: int, *, what: str = "vector") -> np.ndarray:
    """Inverse of ``encode_vector``; checks the length and finiteness. Returns (length,) float32."""
    if not isinstance(text, str):
        raise PayloadError(f"{what} must be a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError(f"{what} is not base64") from None
    if len(raw) != 4 * length:
        raise PayloadError(f"{what} has {len(raw) // 4} float32 values, expected {length}")
    vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vec)):
        raise PayloadError(f"{what} contains NaN or infinity")
    return vec


class UpdateRejected(RoundFailed):
    """The member's own local update is unusable for this round (shape, weight, values)."""


class ServerRound(ABC):
    """The server half of one round: accepts stage messages, closes stages.

    Its core is typed (``opening``, ``accept``, ``close_stage``); the REST round manager adds
    the wire form at its edge (``parse``, ``first_broadcast``, ``close``), the in-memory driver
    (``sdk.wire.run_in_memory``) passes the typed messages as they are.
    """

    stages: tuple[str, ...]
    # Every value of a valid aggregate lies in [-aggregate_bound, aggregate_bound]: the round
    # manager publishes nothing outside it (one member's message must not poison the router).
    aggregate_bound: float = float("inf")

    def opening(self, client_id: str) -> object:
        """The typed message a client receives before the first stage (default: nothing)."""
        return {}

    def encode(self, msg: object) -> dict[str, Any]:
        """The wire (JSON) form of a typed server message (default: it already is one)."""
        assert isinstance(msg, dict)
        return msg

    def first_broadcast(self, client_id: str) -> dict[str, Any]:
        """What a client receives before the first stage, in its wire form."""
        return self.encode(self.opening(client_id))

    @abstractmethod
    def parse(self, stage: str, client_id: str, payload: StagePayload) -> object:
        """Decode and validate one client's message without touching round state (it runs
        concurrently, outside the round lock); raise ``PayloadError``."""

    @abstractmethod
    def accept(self, stage: str, client_id: str, parsed: object) -> None:
        """Absorb a typed message (as ``parse`` returns it); raise ``PayloadError``."""

    @abstractmethod
    def close_stage(self, stage: str) -> dict[str, object]:
        """End a stage with the messages accepted so far; returns the next stage's typed input
        per client id (empty after the last stage). Raise ``RoundFailed`` to end the round."""

    def close(self, stage: str) -> dict[str, dict[str, Any]]:
        """``close_stage`` with each next-stage input in its wire form."""
        return {cid: self.encode(msg) for cid, msg in self.close_stage(stage).items()}

    @abstractmethod
    def result(self) -> np.ndarray:
        """The aggregate, (vector_length,) float32, once the last stage closed."""

    @abstractmethod
    def survivors(self) -> tuple[list[str], float]:
        """The client ids whose updates the aggregate combines and the sum of their weights,
        once the last stage closed."""


class ClientRound(ABC):
    """The client half of one round: turns the server's stage input into its stage message.

    Its core is typed (``reply``); ``message`` adds the wire form for the REST runner.
    """

    @abstractmethod
    def reply(self, stage: str, server_msg: object) -> object:
        """The typed message for ``stage`` given the server's typed input for it; raises
        ``RoundFailed`` (``UpdateRejected`` when the local update is the reason)."""

    def decode(self, stage: str, server_input: dict[str, Any]) -> object:
        """The typed form of the server's wire input (default: the JSON object itself)."""
        return server_input

    def encode(self, msg: object) -> StagePayload:
        """The wire form of a typed reply (default: it already is one)."""
        assert isinstance(msg, (dict, bytes))
        return msg

    def message(self, stage: str, server_input: dict[str, Any]) -> StagePayload:
        """The wire message for ``stage`` given the server's wire input for it."""
        return self.encode(self.reply(stage, self.decode(stage, server_input)))

    def state(self) -> dict[str, Any]:
        """JSON state to persist with each sent message, so that a client restarted mid-round
        continues it (``RoundKind.client(..., state=...)``); it may hold round secrets."""
        return {}


class RoundKind(ABC):
    """A factory of both halves of one protocol."""

    name: str

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill in creation-time parameters (seeds) before the spec is persisted."""
        return dict(params)

    def privacy(self, spec: RoundSpec) -> RoundPrivacy:
        """What the round exposes (default: plain updates to the server); raises
        ``ValueError`` on params the kind refuses."""
        return RoundPrivacy(masked=False, min_survivors=spec.min_clients)

    @abstractmethod
    def server(self, spec: RoundSpec) -> ServerRound:
        """A fresh server half."""

    @abstractmethod
    def client(self, spec: RoundSpec, *, client_id: str, key: Ed25519PrivateKey,
               update: UpdateSource, state: dict[str, Any] | None,
               rng: np.random.Generator | None = None) -> ClientRound:
        """A client half that waits on ``update`` for (vector (vector_length,), weight n_k) when
        a stage needs them; ``state`` is what ``ClientRound.state`` returned before a restart,
        if any; ``rng`` seeds its randomized encoding (default: fresh OS entropy)."""

    def wire_size(self, msg: object) -> int:
        """Bytes of one typed message on the wire (JSON objects compact)."""
        if isinstance(msg, bytes):
            return len(msg)
        return len(json.dumps(msg, separators=(",", ":")))


# -- rm_fedavg: the plain (unmasked) baseline --------------------------------------------------
_WEIGHT = struct.Struct("<d")


class _Update(NamedTuple):
    weight: float
    vector: np.ndarray  # (P,) float32


def encode_update(vector: np.ndarray, weight: float) -> bytes:
    """The binary ``rm_fedavg`` message: float64 weight, then the float32 LE vector."""
    return _WEIGHT.pack(float(weight)) + np.ascontiguousarray(vector, dtype="<f4").tobytes()


class FedAvgParams(BaseModel):
    """``params`` of an ``rm_fedavg`` round: the bounds every member's message must meet, so
    that no single member can dominate or overflow the average."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_weight: float = Field(default=1e6, gt=0, allow_inf_nan=False,
                              description="largest weight n_k a member may report")
    max_abs: float = Field(default=1e4, gt=0, allow_inf_nan=False,
                           description="largest |value| in an update (and the aggregate)")

    @classmethod
    def parse(cls, params: dict[str, Any]) -> FedAvgParams:
        """Validate a round's ``params`` (the update-source keys aside); ``ValueError``."""
        try:
            return cls.model_validate({k: v for k, v in params.items()
                                       if k not in UPDATE_PARAMS})
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}"
                        for e in exc.errors()]
            raise ValueError(f"{'; '.join(problems)} (rm_fedavg params: max_weight, "
                             "max_abs)") from None


class _FedAvgServer(ServerRound):
    stages = ("update",)

    def __init__(self, spec: RoundSpec) -> None:
        self.spec = spec
        self.bounds = FedAvgParams.parse(spec.params)
        self.aggregate_bound = self.bounds.max_abs
        self._sum = np.zeros(spec.vector_length, dtype=np.float64)
        self._weight = 0.0
        self._count = 0
        self._senders: list[str] = []
        self._result: np.ndarray | None = None

    def parse(self, stage: str, client_id: str, payload: StagePayload) -> object:
        length = self.spec.vector_length
        if isinstance(payload, bytes):
            if len(payload) != _WEIGHT.size + 4 * length:
                raise PayloadError(f"stage {stage}: binary update has {len(payload)} bytes, "
                                   f"expected {_WEIGHT.size + 4 * length} (float64 weight + "
                                   f"{length} float32)")
            (weight,) = _WEIGHT.unpack_from(payload)
            vec = np.frombuffer(payload, dtype="<f4", offset=_WEIGHT.size)
            if not np.all(np.isfinite(vec)):
                raise PayloadError(f"stage {stage}: vector contains NaN or infinity")
        else:
            weight = payload.get("weight")
            vec = decode_vector(payload.get("vector"), length)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight > 0 \
                or not np.isfinite(weight):
            raise PayloadError(f"stage {stage}: weight must be a positive number")
        if weight > self.bounds.max_weight:
            raise PayloadError(f"stage {stage}: weight {weight:g} is over this round's "
                               f"max_weight {self.bounds.max_weight:g}")
        if vec.size and float(np.max(np.abs(vec))) > self.bounds.max_abs:
            raise PayloadError(f"stage {stage}: a value is outside this round's range "
                               f"[-{self.bounds.max_abs:g}, {self.bounds.max_abs:g}] (max_abs)")
        return _Update(float(weight), vec)

    def accept(self, stage: str, client_id: str, parsed: object) -> None:
        assert isinstance(parsed, _Update)
        self._sum += parsed.weight * parsed.vector
        self._weight += parsed.weight
        self._count += 1
        self._senders.append(client_id)

    def close_stage(self, stage: str) -> dict[str, object]:
        if self._count < self.spec.min_clients:
            raise RoundFailed(f"only {self._count} update(s) arrived, min_clients is "
                              f"{self.spec.min_clients}")
        self._result = (self._sum / self._weight).astype(np.float32)
        return {}

    def result(self) -> np.ndarray:
        if self._result is None:
            raise RoundFailed("the round has not finished")
        return self._result

    def survivors(self) -> tuple[list[str], float]:
        return list(self._senders), self._weight


class _FedAvgClient(ClientRound):
    def __init__(self, update: UpdateSource) -> None:
        self._update = update

    def reply(self, stage: str, server_msg: object) -> object:
        vector, weight = self._update.result()
        return _Update(float(weight), np.asarray(vector, dtype=np.float32))

    def encode(self, msg: object) -> StagePayload:
        assert isinstance(msg, _Update)
        return encode_update(msg.vector, msg.weight)


class FedAvgKind(RoundKind):
    """Plain weighted FedAvg: each client sends (n_k, phi_k) in the clear (binary body)."""

    name = "rm_fedavg"

    def server(self, spec: RoundSpec) -> ServerRound:
        return _FedAvgServer(spec)

    def client(self, spec: RoundSpec, *, client_id: str, key: Ed25519PrivateKey,
               update: UpdateSource, state: dict[str, Any] | None,
               rng: np.random.Generator | None = None) -> ClientRound:
        return _FedAvgClient(update)

    def wire_size(self, msg: object) -> int:
        if isinstance(msg, _Update):
            return _WEIGHT.size + 4 * int(msg.vector.size)
        return super().wire_size(msg)

