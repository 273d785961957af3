"""The round-kind interface: the server and client halves of each aggregation protocol.

Each kind is defined once, sans-IO, and three drivers run it: the server's round manager and
the member's runner over REST, and ``run_in_memory`` (``_memory``) in one process. The halves
speak typed messages; the REST drivers add the wire form (``sdk.wire.StagePayload``) at their
edge and otherwise only move stage payloads between these objects, persist them and enforce
deadlines. A kind chooses the wire form per stage, and its server half parses each payload
once, outside the round lock (``parse``), before absorbing it under the lock (``accept``).
Every router round sums deltas (``as_delta`` / ``from_delta``), whichever driver runs it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field

from sdk.wire import DPTerms, RoundSpec, StagePayload

__all__ = [
    "ClientRound",
    "RoundFailed",
    "RoundKind",
    "RoundPrivacy",
    "ServerRound",
    "UpdateRejected",
    "UpdateSource",
    "as_delta",
    "from_delta",
    "ready_update",
]


# The client's local update (vector_length,) and weight n_k. The runner computes it in the
# background while a kind's input-free stages (SecAgg+'s key agreement) go ahead; a kind waits
# on it only at the stage that needs it, and gets what the local update raised, if it failed.
UpdateSource = Future[tuple[np.ndarray, float]]
"""A member's local update for a round, computed in the background: (vector, weight n_k)."""


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


class RoundFailed(RuntimeError):
    """The round cannot finish (too few survivors, protocol abort)."""


class RoundPrivacy(BaseModel):
    """What a round exposes of one member's update, as its kind and params set it: what a
    member's site policy checks before it sends anything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    masked: bool = Field(description="the server learns only the sum of the survivors' updates")
    min_survivors: int = Field(ge=1, description="the fewest members whose updates an accepted "
                               "aggregate may combine (SecAgg's threshold, else min_clients)")
    dp: DPTerms | None = Field(default=None, description="each member clips its update and "
                               "adds its share of Gaussian noise")


class UpdateRejected(RoundFailed):
    """The member's own local update is unusable for this round (shape, weight, values)."""


class ServerRound(ABC):
    """The server half of one round: accepts stage messages, closes stages.

    Its core is typed (``opening``, ``accept``, ``close_stage``); the REST round manager adds
    the wire form at its edge (``parse``, ``first_broadcast``, ``close``), the in-memory driver
    (``run_in_memory``) passes the typed messages as they are.
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
