"""Round kinds: the server and client halves of each aggregation protocol, behind one interface.

The REST layer only moves JSON payloads between these objects, persists them and enforces
deadlines. A kind registers itself in ``ROUND_KINDS``; ``rm_fedavg`` (plain weighted averaging,
the baseline) lives here, ``router_secagg`` (sdk.secagg SecAgg+) in ``_secagg_kind``.
"""

from __future__ import annotations

import base64
import binascii
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ROUND_KINDS",
    "ClientRound",
    "FedAvgKind",
    "PayloadError",
    "RoundFailed",
    "RoundKind",
    "RoundSpec",
    "ServerRound",
    "decode_vector",
    "encode_vector",
]


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


class ServerRound(ABC):
    """The server half of one round: accepts stage messages, closes stages."""

    stages: tuple[str, ...]

    def first_broadcast(self, client_id: str) -> dict[str, Any]:
        """What a client receives before the first stage (default: nothing)."""
        return {}

    @abstractmethod
    def accept(self, stage: str, client_id: str, payload: dict[str, Any]) -> None:
        """Validate and absorb one client's message; raise ``PayloadError``."""

    @abstractmethod
    def close(self, stage: str) -> dict[str, dict[str, Any]]:
        """End a stage with the messages accepted so far; returns the next stage's input per
        client id (empty after the last stage). Raise ``RoundFailed`` to end the round."""

    @abstractmethod
    def result(self) -> np.ndarray:
        """The aggregate, (vector_length,) float32, once the last stage closed."""


class ClientRound(ABC):
    """The client half of one round: turns the server's stage input into its stage message."""

    @abstractmethod
    def message(self, stage: str, server_input: dict[str, Any]) -> dict[str, Any]:
        """The message for ``stage`` given the server's input for it."""

    def state(self) -> dict[str, Any]:
        """JSON state to persist between stages (so the client survives its own restart)."""
        return {}


class RoundKind(ABC):
    """A factory of both halves of one protocol."""

    name: str

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill in creation-time parameters (seeds) before the spec is persisted."""
        return dict(params)

    @abstractmethod
    def server(self, spec: RoundSpec) -> ServerRound:
        """A fresh server half."""

    @abstractmethod
    def client(self, spec: RoundSpec, *, client_id: str, key: Ed25519PrivateKey,
               update: np.ndarray, weight: float, state: dict[str, Any] | None) -> ClientRound:
        """A client half for this client's ``update`` (vector_length,) and ``weight`` n_k;
        ``state`` is what ``ClientRound.state`` returned before a restart, if any."""


# -- rm_fedavg: the plain (unmasked) baseline --------------------------------------------------
class _FedAvgServer(ServerRound):
    stages = ("update",)

    def __init__(self, spec: RoundSpec) -> None:
        self.spec = spec
        self._sum = np.zeros(spec.vector_length, dtype=np.float64)
        self._weight = 0.0
        self._count = 0
        self._result: np.ndarray | None = None

    def accept(self, stage: str, client_id: str, payload: dict[str, Any]) -> None:
        weight = payload.get("weight")
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not weight > 0:
            raise PayloadError(f"stage {stage}: weight must be a positive number")
        vec = decode_vector(payload.get("vector"), self.spec.vector_length)
        self._sum += float(weight) * vec
        self._weight += float(weight)
        self._count += 1

    def close(self, stage: str) -> dict[str, dict[str, Any]]:
        if self._count < self.spec.min_clients:
            raise RoundFailed(f"only {self._count} update(s) arrived, min_clients is "
                              f"{self.spec.min_clients}")
        self._result = (self._sum / self._weight).astype(np.float32)
        return {}

    def result(self) -> np.ndarray:
        if self._result is None:
            raise RoundFailed("the round has not finished")
        return self._result


class _FedAvgClient(ClientRound):
    def __init__(self, update: np.ndarray, weight: float) -> None:
        self._payload = {"weight": weight, "vector": encode_vector(update)}

    def message(self, stage: str, server_input: dict[str, Any]) -> dict[str, Any]:
        return self._payload


class FedAvgKind(RoundKind):
    """Plain weighted FedAvg: each client sends (n_k, phi_k) in the clear."""

    name = "rm_fedavg"

    def server(self, spec: RoundSpec) -> ServerRound:
        return _FedAvgServer(spec)

    def client(self, spec: RoundSpec, *, client_id: str, key: Ed25519PrivateKey,
               update: np.ndarray, weight: float, state: dict[str, Any] | None) -> ClientRound:
        return _FedAvgClient(update, weight)


ROUND_KINDS: dict[str, RoundKind] = {FedAvgKind.name: FedAvgKind()}
