"""A round on the wire: how an operator opens it (``RoundCreate``), the one description both
halves of its kind read (``RoundSpec``) and its status (``RoundInfo``, which extends it), its
DP terms, a member's refusal, the stage messages in their two forms (a JSON object, or the raw
bytes of an ``application/octet-stream`` body, with the vector encoding), and the member's
work list (``Work``). A malformed stage message is a ``PayloadError`` (HTTP 422) that names the
stage and the reason; the round kinds (``sdk.rounds``) choose the form per stage.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sdk.wire._rewards import PendingQuery
from sdk.wire._router_config import RouterConfigRef
from sdk.wire._schemas import PayloadError, _OneLine, _Reply, _Wire

__all__ = [
    "ROUTER_ROUND_PARAM",
    "UPDATE_PARAMS",
    "DPAccount",
    "DPTerms",
    "Refusal",
    "RoundCreate",
    "RoundFailure",
    "RoundInfo",
    "RoundRefusal",
    "RoundSpec",
    "StageAck",
    "StageBroadcast",
    "StagePayload",
    "StageSubmit",
    "Work",
    "decode_vector",
    "encode_vector",
]

ROUTER_ROUND_PARAM = "router_round"
"""The federation's round index (the router lr schedule's clock), read by the router update."""


class _UpdateParams(BaseModel):
    """The bounds of the round ``params`` addressed to the members' updates, not to a
    round kind (``UPDATE_PARAMS``), checked when the round is created: a value no member can
    use would only fail the round at its deadline."""

    model_config = ConfigDict(extra="ignore", strict=True)

    router_round: int = Field(default=0, ge=0, le=2**31 - 1)
    # Options of the members' own update source (a site's trainer, a demo's stand-in): the
    # server knows no update source, so it passes them through unread and the source checks them.
    update: dict[str, Any] = Field(default_factory=dict)


_PARAMS_DEPTH = 16
"""How deep round ``params`` may nest: no kind's or update source's option comes near it."""

UPDATE_PARAMS = frozenset(_UpdateParams.model_fields)
"""Round ``params`` addressed to the members' update sources, not to a round kind (a kind passes
them through)."""


class RoundCreate(_Wire):
    """Admin request that opens a round."""

    kind: str = Field(default="router_secagg", pattern=r"^[a-z_]{1,40}$", description="a round "
                      "kind the server registers (``sdk.rounds.ROUND_KINDS``); another is "
                      "refused when the round is created")
    vector_length: int | None = Field(
        default=None, ge=1, le=50_000_000, description="the router's parameter count; None: "
        "the consortium's router configuration's (a server that declares none needs it)")
    participants: list[str] | None = Field(default=None, description="client ids; default all")
    min_clients: int = Field(default=2, ge=1)
    stage_deadline_s: float | None = Field(default=None, gt=0, le=86_400)
    params: dict[str, Any] = Field(default_factory=dict, description="kind-specific options")

    @field_validator("params")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        # JSON admits Infinity and NaN; no round parameter means either. The walk refuses
        # nesting past _PARAMS_DEPTH: deeper JSON would exhaust its recursion (a 500).
        def walk(v: Any, depth: int) -> bool:
            if depth > _PARAMS_DEPTH:
                raise ValueError(f"round parameters nest at most {_PARAMS_DEPTH} levels deep")
            if isinstance(v, float):
                return math.isfinite(v)
            if isinstance(v, dict):
                return all(walk(x, depth + 1) for x in v.values())
            if isinstance(v, list):
                return all(walk(x, depth + 1) for x in v)
            return True
        if not walk(value, 1):
            raise ValueError("round parameters must be finite numbers (no NaN or Infinity)")
        try:
            _UpdateParams.model_validate(value)
        except ValidationError as exc:
            raise ValueError("; ".join(f"params.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                       for e in exc.errors())) from None
        return value


class DPTerms(_Reply):
    """A round's client-level DP: each member clips its update to L2 norm ``clip_norm`` and
    adds its share of Gaussian noise, so that any accepted aggregate carries std
    ``noise_multiplier * clip_norm`` (the sensitivity to one member; weights are 1)."""

    clip_norm: float
    noise_multiplier: float
    sample_rate: float
    delta: float


class DPAccount(DPTerms):
    """A DP round's privacy cost as the server accounts it (opacus' RDP accountant)."""

    epsilon: float = Field(description="this round alone, at ``delta``")
    epsilon_total: float | None = Field(default=None, description="every finished DP round "
                                        "of this server up to this one, composed, at "
                                        "``delta``; set once the round finished")


class RoundRefusal(_Wire):
    """A member's refusal of a round its site policy does not allow, or its report that it
    abandoned the round (reason ``abandoned``: its own half failed) (``POST
    /v1/rounds/{id}/refusal``): it sends nothing more in that round and never retries it."""

    reason: str = Field(pattern=r"^[a-z_]{1,40}$", description="which policy rule refused it "
                        "(round_kind, participants, captured, threshold, dp, epsilon, "
                        "local_samples, ...), or abandoned")
    detail: Annotated[_OneLine, Field(max_length=1000)] = Field(
        default="", description="the rule, in words (control characters such as newlines and "
        "escapes are stored escaped, the bound counting them)")


class Refusal(RoundRefusal):
    """A refusal as the server recorded it (``RoundInfo.refusals``)."""

    model_config = ConfigDict(extra="ignore")  # a response, unlike the RoundRefusal it extends

    client_id: str
    at: float


class RoundFailure(_Reply):
    """A participant that left a round before its end, where and why (``RoundInfo.failures``):
    what the operator reads to know whom to ask for what."""

    member: str = Field(description="the participant's roster name (its id if none is known)")
    client_id: str
    stage: str = Field(description="the first stage it sent nothing for")
    reason: str = Field(description="what it reported (abandoned: its local cause; a policy "
                        "refusal: the rule; revoked), else that it gave no answer")


class RoundSpec(BaseModel):
    """A round as the server announces it when it opens it, fixed for the round's life: the
    input of both halves of its kind (``sdk.rounds``), persisted so the round can be rebuilt,
    and the first fields of every ``RoundInfo`` (which extends it, so a member hands the
    round's status to its kind as it is, never copying fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round_id: int
    kind: str
    participants: list[str] = Field(description="client ids, in protocol order (index + 1 is "
                                    "the SecAgg+ protocol id)")
    public_keys: list[str] = Field(description="participants' Ed25519 identity keys, same order")
    vector_length: int
    min_clients: int
    stage_deadline_s: float
    base_version: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    router_config: RouterConfigRef | None = Field(
        default=None, description="the router configuration the round trains (None: the "
        "server declares none)")


class RoundInfo(RoundSpec):
    """Status of one round: its ``RoundSpec`` and how far it got."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # a response (see ``_Reply``)

    status: Literal["open", "finished", "failed"]
    stage: str | None
    stages: list[str]
    dropouts: list[str]
    router_version: int | None
    error: str | None
    created_at: float
    finished_at: float | None
    refusals: list[Refusal] = Field(default_factory=list, description="members whose site "
                                    "policy refused this round, and why")
    failures: list[RoundFailure] = Field(default_factory=list, description="participants "
                                         "that left the round: where and why")
    dp: DPAccount | None = Field(default=None, description="client-level DP of the round and "
                                 "its accounted cost; None: no DP")
    captured: bool = Field(default=False, description="the server keeps every message of this "
                           "round as received, and what it published, in its capture directory "
                           "(for the consortium's auditor); fixed when the round opens")
    resumed: str | None = Field(default=None, description="how the round went on after each "
                                "server restart it lived through (null: none)")

    @classmethod
    def of(cls, spec: RoundSpec, **status: Any) -> RoundInfo:
        """The status of the round ``spec`` describes (``status``: this class's own fields)."""
        return cls(**dict(spec), **status)


StagePayload = dict[str, Any] | bytes
"""A stage message on the wire: a JSON object, or the raw bytes of an octet-stream body."""


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


class StageSubmit(_Wire):
    """A client's message for one stage (the sans-IO protocol message, as JSON)."""

    payload: dict[str, Any]


class StageBroadcast(_Reply):
    """The server's input for a client's stage; ``ready`` is false until the previous stage
    closed."""

    round_id: int
    stage: str
    ready: bool
    round_status: str
    payload: dict[str, Any] | None = None


class StageAck(_Reply):
    """Sent only once the message is committed; identical retries get the same ack."""

    round_id: int
    stage: str
    client_id: str
    digest: str
    stored_at: float
    next: StageBroadcast | None = Field(
        default=None, description="with ``wait_next_s``: the next stage's input (saves a GET)")


class Work(_Reply):
    """What a client has to do now (``GET /v1/work``): open rounds that still wait for its
    message, and its queued (pull-mode) reward queries."""

    rounds: list[int] = Field(default_factory=list)
    queries: list[PendingQuery] = Field(default_factory=list)
