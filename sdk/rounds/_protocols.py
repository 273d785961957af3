"""The round-kind interface: the server and client halves of each aggregation protocol.

Each kind is defined once, sans-IO, and three drivers run it: the server's round manager and
the member's runner over REST, and ``run_in_memory`` (``_memory``) in one process. The halves
speak typed messages; the REST drivers add the wire form (``sdk.wire.StagePayload``) at their
edge and otherwise only move stage payloads between these objects, persist them and enforce
deadlines. A kind chooses the wire form per stage, and its server half parses each payload
once, outside the round lock (``parse``), before absorbing it under the lock (``accept``).
Every router round sums deltas (``as_delta`` / ``from_delta``), whichever driver runs it.
The drivers own every wait and thread: a half takes messages in and gives messages out.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, Generic, Self, TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field

from sdk.wire import DPTerms, RoundSpec, StagePayload

__all__ = [
    "ClientRound",
    "RoundFailed",
    "RoundKind",
    "RoundPrivacy",
    "RoundTerms",
    "ServerRound",
    "UpdateRejected",
    "as_delta",
    "from_delta",
]


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


@dataclass(frozen=True)
class RoundTerms:
    """A round's spec with its ``params`` parsed once, by its kind (``RoundKind.terms``): what
    both halves and the drivers read, so no driver parses the params again. Each kind extends
    it with its own typed parameters."""

    spec: RoundSpec
    privacy: RoundPrivacy

    def numbered(self, round_id: int) -> Self:
        """These terms for round ``round_id``: the server parses a new round's params before
        its store gives the round an id, then numbers the parsed terms (no second parse)."""
        return replace(self, spec=self.spec.model_copy(update={"round_id": round_id}))


TermsT = TypeVar("TermsT", bound=RoundTerms)
ClientMsgT = TypeVar("ClientMsgT")
ServerMsgT = TypeVar("ServerMsgT")


class ServerRound(ABC, Generic[ClientMsgT, ServerMsgT]):
    """The server half of one round: accepts stage messages (``ClientMsgT``), closes stages
    into the next stage's inputs (``ServerMsgT``).

    Its core is typed (``opening``, ``accept``, ``close_stage``); the REST round manager adds
    the wire form at its edge (``parse``, ``first_broadcast``, ``close``), the in-memory driver
    (``run_in_memory``) passes the typed messages as they are.
    """

    stages: tuple[str, ...]
    # Every value of a valid aggregate lies in [-aggregate_bound, aggregate_bound]: the round
    # manager publishes nothing outside it (one member's message must not poison the router).
    aggregate_bound: float = float("inf")

    @abstractmethod
    def opening(self, client_id: str) -> ServerMsgT:
        """The typed message a client receives before the first stage."""

    @abstractmethod
    def encode(self, msg: ServerMsgT) -> dict[str, Any]:
        """The wire (JSON) form of a typed server message."""

    def first_broadcast(self, client_id: str) -> dict[str, Any]:
        """What a client receives before the first stage, in its wire form."""
        return self.encode(self.opening(client_id))

    @abstractmethod
    def parse(self, stage: str, client_id: str, payload: StagePayload) -> ClientMsgT:
        """Decode and validate one client's message without touching round state (it runs
        concurrently, outside the round lock); raise ``PayloadError``."""

    @abstractmethod
    def accept(self, stage: str, client_id: str, parsed: ClientMsgT) -> None:
        """Absorb a typed message (as ``parse`` returns it); raise ``PayloadError``."""

    @abstractmethod
    def close_stage(self, stage: str) -> dict[str, ServerMsgT]:
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


class ClientRound(ABC, Generic[ServerMsgT, ClientMsgT]):
    """The client half of one round: turns the server's stage input (``ServerMsgT``) into its
    stage message (``ClientMsgT``), with no I/O, no thread and no wait.

    Its driver hands it the local update (``provide``) before the reply to ``update_stage``,
    and may run ``precompute`` between replies, off the round's critical path; ``message``
    adds the wire form for the REST runner.
    """

    update_stage: str  # the stage whose reply carries the local update
    # Whether ``precompute`` does work worth running in the background once the update is in.
    precomputes: bool = False

    @property
    @abstractmethod
    def has_update(self) -> bool:
        """Whether ``provide`` has handed this half the local update."""

    @abstractmethod
    def provide(self, vector: np.ndarray, weight: float) -> None:
        """Take the local update (vector_length,) and its weight n_k (once); raises
        ``UpdateRejected`` when the round cannot use it."""

    def precompute(self) -> None:
        """Work on the provided update that a later reply needs (default: none); the driver
        never runs it beside ``reply`` or ``provide`` on the same half."""

    @abstractmethod
    def reply(self, stage: str, server_msg: ServerMsgT) -> ClientMsgT:
        """The typed message for ``stage`` given the server's typed input for it; raises
        ``RoundFailed`` (``UpdateRejected`` when the local update is the reason)."""

    @abstractmethod
    def decode(self, stage: str, server_input: dict[str, Any]) -> ServerMsgT:
        """The typed form of the server's wire input; raises ``RoundFailed``."""

    @abstractmethod
    def encode(self, msg: ClientMsgT) -> StagePayload:
        """The wire form of a typed reply."""

    def message(self, stage: str, server_input: dict[str, Any]) -> StagePayload:
        """The wire message for ``stage`` given the server's wire input for it."""
        return self.encode(self.reply(stage, self.decode(stage, server_input)))

    def state(self) -> dict[str, Any]:
        """JSON state to persist with each sent message, so that a client restarted mid-round
        continues it (``RoundKind.client(..., state=...)``); it may hold round secrets."""
        return {}


class RoundKind(ABC, Generic[TermsT]):
    """A factory of both halves of one protocol, over its typed round terms (``TermsT``)."""

    name: str
    stages: tuple[str, ...]  # the round's stages in order, the same for every round of the kind

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill in creation-time parameters (seeds) before the spec is persisted."""
        return dict(params)

    @abstractmethod
    def terms(self, spec: RoundSpec) -> TermsT:
        """The round ``spec`` with its params parsed and checked, once per round; raises
        ``ValueError`` on params the kind refuses."""

    @abstractmethod
    def server(self, terms: TermsT) -> ServerRound[Any, Any]:
        """A fresh server half; raises ``RoundFailed`` when the round cannot run."""

    @abstractmethod
    def client(self, terms: TermsT, *, client_id: str, key: Ed25519PrivateKey,
               state: dict[str, Any] | None,
               rng: np.random.Generator | None = None) -> ClientRound[Any, Any]:
        """A client half; ``state`` is what ``ClientRound.state`` returned before a restart,
        if any; ``rng`` seeds its randomized encoding (default: fresh OS entropy)."""

    def wire_size(self, msg: object) -> int:
        """Bytes of one typed message on the wire (JSON objects compact)."""
        if isinstance(msg, bytes):
            return len(msg)
        return len(json.dumps(msg, separators=(",", ":")))
