"""``rm_fedavg``: plain weighted averaging, the unmasked baseline, behind the ``RoundKind``
interface. Each member sends its weight n_k and its update in the clear, as one binary body
(``encode_update``) or a JSON object; the server checks both against the round's bounds."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sdk.rounds._protocols import (
    ClientRound,
    RoundFailed,
    RoundKind,
    RoundPrivacy,
    RoundTerms,
    ServerRound,
    UpdateRejected,
)
from sdk.wire import UPDATE_PARAMS, PayloadError, RoundSpec, StagePayload, decode_vector

__all__ = ["FedAvgKind", "FedAvgParams", "FedAvgUpdate", "encode_update"]

_WEIGHT = struct.Struct("<d")


class FedAvgUpdate(NamedTuple):
    """One member's ``rm_fedavg`` message, typed: its weight n_k and its update."""

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
        """Validate a round's ``params`` (the members' update keys aside); ``ValueError``."""
        try:
            return cls.model_validate({k: v for k, v in params.items()
                                       if k not in UPDATE_PARAMS})
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg']}"
                        for e in exc.errors()]
            raise ValueError(f"{'; '.join(problems)} (rm_fedavg params: max_weight, "
                             "max_abs)") from None


@dataclass(frozen=True)
class _FedAvgTerms(RoundTerms):
    bounds: FedAvgParams


class _FedAvgServer(ServerRound[FedAvgUpdate, dict[str, Any]]):
    stages = ("update",)

    def __init__(self, terms: _FedAvgTerms) -> None:
        spec = self.spec = terms.spec
        self.bounds = terms.bounds
        self.aggregate_bound = self.bounds.max_abs
        self._sum = np.zeros(spec.vector_length, dtype=np.float64)
        self._weight = 0.0
        self._count = 0
        self._senders: list[str] = []
        self._result: np.ndarray | None = None

    def opening(self, client_id: str) -> dict[str, Any]:
        return {}

    def encode(self, msg: dict[str, Any]) -> dict[str, Any]:
        return msg

    def parse(self, stage: str, client_id: str, payload: StagePayload) -> FedAvgUpdate:
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
        return FedAvgUpdate(float(weight), vec)

    def accept(self, stage: str, client_id: str, parsed: FedAvgUpdate) -> None:
        self._sum += parsed.weight * parsed.vector
        self._weight += parsed.weight
        self._count += 1
        self._senders.append(client_id)

    def close_stage(self, stage: str) -> dict[str, dict[str, Any]]:
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


class _FedAvgClient(ClientRound[dict[str, Any], FedAvgUpdate]):
    update_stage = "update"

    def __init__(self) -> None:
        self._update: FedAvgUpdate | None = None

    @property
    def has_update(self) -> bool:
        return self._update is not None

    def provide(self, vector: np.ndarray, weight: float) -> None:
        self._update = FedAvgUpdate(float(weight), np.asarray(vector, dtype=np.float32))

    def reply(self, stage: str, server_msg: dict[str, Any]) -> FedAvgUpdate:
        if self._update is None:
            raise UpdateRejected(f"stage {stage}: no local update was provided")
        return self._update

    def decode(self, stage: str, server_input: dict[str, Any]) -> dict[str, Any]:
        return server_input

    def encode(self, msg: FedAvgUpdate) -> StagePayload:
        return encode_update(msg.vector, msg.weight)


class FedAvgKind(RoundKind[_FedAvgTerms]):
    """Plain weighted FedAvg: each client sends (n_k, phi_k) in the clear (binary body)."""

    name = "rm_fedavg"
    stages = _FedAvgServer.stages

    def terms(self, spec: RoundSpec) -> _FedAvgTerms:
        return _FedAvgTerms(spec, RoundPrivacy(masked=False, min_survivors=spec.min_clients),
                            FedAvgParams.parse(spec.params))

    def server(self, terms: _FedAvgTerms) -> _FedAvgServer:
        return _FedAvgServer(terms)

    def client(self, terms: _FedAvgTerms, *, client_id: str, key: Ed25519PrivateKey,
               state: dict[str, Any] | None,
               rng: np.random.Generator | None = None) -> _FedAvgClient:
        return _FedAvgClient()

    def wire_size(self, msg: object) -> int:
        if isinstance(msg, FedAvgUpdate):
            return _WEIGHT.size + 4 * int(msg.vector.size)
        return super().wire_size(msg)
