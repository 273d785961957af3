"""Wire schemas of the REST protocol, shared by the server app, the client app and the runner."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from sdk.wire._auth import parse_public_key
from sdk.wire._router_config import ConsortiumRouterConfig

__all__ = [
    "ROUTER_ROUND_PARAM",
    "UPDATE_PARAMS",
    "AuditBudget",
    "ClipBoundAck",
    "ClipBoundAnnouncement",
    "DPAccount",
    "DPTerms",
    "EnrollRequest",
    "EnrollResponse",
    "ErrorBody",
    "Health",
    "MissingImages",
    "PendingQuery",
    "Refusal",
    "RewardAnswer",
    "RewardItem",
    "RewardRequest",
    "RewardResponse",
    "RoundCreate",
    "RoundInfo",
    "RoundRefusal",
    "RoundSpec",
    "RouterConfigInfo",
    "RouterConfigRef",
    "RouterVersionInfo",
    "StageAck",
    "StageBroadcast",
    "StageSubmit",
    "Work",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


def _a_public_key(text: str) -> str:
    parse_public_key(text)  # its ValueError is the caller's 422, never a 500 further in
    return text


_PublicKey = Annotated[str, Field(min_length=40, max_length=64,
                                  description="raw Ed25519 public key, base64"),
                       AfterValidator(_a_public_key)]
"""A public key as it arrives: checked to be one where the request is parsed."""

_SHA256 = r"^[0-9a-f]{64}$"


class _Wire(BaseModel):
    """A request: an unknown field is refused (422), never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class _Reply(BaseModel):
    """A response: a field added by a newer app is ignored, so an older caller (a member app
    not yet upgraded) still parses it. Requests stay strict (``_Wire``)."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(_Reply):
    """Every 4xx answer: a human-readable ``detail``."""

    detail: str


class Health(_Reply):
    """``/v1/health``."""

    status: Literal["ok", "degraded"] = "ok"
    app: str
    version: str
    detail: str | None = Field(default=None, description="why the app is degraded (HTTP 503)")
    started_at: float | None = Field(default=None, description="when this server process "
                                     "started (Unix s; the server only)")
    recovered_rounds: list[int] = Field(default_factory=list, description="open rounds this "
                                        "server process resumed from its store at start")


class EnrollRequest(_Wire):
    """A client's one-time enrollment: its roster name, token and identity key."""

    name: str = Field(pattern=_NAME)
    token: str = Field(min_length=8, max_length=128)
    public_key: _PublicKey
    reward_url: str | None = Field(default=None, max_length=512,
                                   description="push-mode base URL of the client app")
    clip_bound: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False,
                                     description="every score this member answers lies in "
                                     "[-clip_bound, clip_bound]; the broker refuses others")


class ClipBoundAnnouncement(_Wire):
    """``POST /v1/identity/clip-bound``, signed by a member: the bound of its current scorer
    (a reward model swapped for one with another normalizer announces its new ``c``)."""

    clip_bound: float = Field(gt=0, le=1e6, allow_inf_nan=False,
                              description="every score this member answers from now on lies "
                              "in [-clip_bound, clip_bound]")


class ClipBoundAck(_Reply):
    """The bound the server now holds for the caller, and the one it replaced."""

    client_id: str
    clip_bound: float
    previous: float | None = Field(default=None, description="the bound announced before "
                                   "(None: the member had announced none)")


class EnrollResponse(_Reply):
    """The id the client signs its later requests with, and the server's identity key."""

    client_id: str
    name: str
    server_public_key: str
    role: str = Field(default="member", description="what this identity may do (roster role)")


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
        # JSON admits Infinity and NaN; no round parameter means either.
        def walk(v: Any) -> bool:
            if isinstance(v, float):
                return math.isfinite(v)
            if isinstance(v, dict):
                return all(walk(x) for x in v.values())
            if isinstance(v, list):
                return all(walk(x) for x in v)
            return True
        if not walk(value):
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
    detail: str = Field(default="", max_length=1000, description="the rule, in words (control "
                        "characters such as newlines and escapes are stored escaped)")

    @field_validator("detail")
    @classmethod
    def _one_line(cls, value: str) -> str:
        # A member's text reaches the server's log and the operator's terminal: with a newline
        # or an ANSI escape it could forge log lines or repaint the screen.
        return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                       for c in value)


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


class RouterConfigRef(_Reply):
    """Which router configuration a round or a router version follows: its lineage, hash and
    parameter count (the configuration itself: ``GET /v1/router/config``)."""

    lineage: int = Field(description="router lineage (a new one starts with a new head order: "
                         "a member's enrollment, or an operator's ``POST /v1/router/lineage``)")
    sha256: str = Field(pattern=_SHA256, description="ConsortiumRouterConfig.sha256")
    num_params: int = Field(description="the configuration's router parameter count")


class RouterConfigInfo(RouterConfigRef):
    """``GET /v1/router/config``: a lineage's router configuration, with its reference."""

    config: ConsortiumRouterConfig
    created_at: float
    current: bool = Field(description="whether rounds open on this lineage now")
    first_version: int | None = Field(default=None, description="the lineage's oldest router "
                                      "version (None: none yet)")
    latest_version: int | None = Field(default=None, description="the lineage's newest router "
                                       "version (None: none yet)")
    started_by: str | None = Field(default=None, description="who started the lineage: an "
                                   "operator, ``settings`` or ``enrollment of NAME``")


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


class RouterRollback(_Wire):
    """Admin request: publish an earlier router version again as the newest."""

    version: int = Field(ge=1, le=2**62, description="the router version to restore")


class RouterVersionInfo(_Reply):
    """Metadata of one global router version; the blob is little-endian float32."""

    version: int
    round_id: int | None
    sha256: str
    size_bytes: int
    length: int
    created_at: float
    router_config: RouterConfigRef | None = Field(
        default=None, description="the configuration (lineage) the version belongs to")
    restored: int | None = Field(default=None, description="a rollback: the version it "
                                 "published again")
    carried_from: int | None = Field(default=None, description="a lineage's first version: "
                                     "the earlier lineage's version whose trunk and heads it "
                                     "carries over")

    def origin(self) -> str:
        """Where the version came from, in words (the console and ``fedmor router history``
        say it the same way): its round, the version a rollback restored, the version a new
        lineage carried over, or the operator's first publication."""
        if self.round_id is not None:
            return f"round {self.round_id}"
        if self.restored is not None:
            return f"restored version {self.restored}"
        if self.carried_from is not None:
            return f"carried over from version {self.carried_from}"
        return "published"


class RewardItem(_Wire):
    """One (image, prompt, response) to score; the image travels once, then by hash."""

    image_sha256: str = Field(pattern=_SHA256)
    image_b64: str | None = Field(default=None, max_length=16_000_000)
    prompt: str = Field(max_length=20_000)
    response: str = Field(max_length=20_000)


class RewardRequest(_Wire):
    """A batch of reward queries, at most :attr:`MAX_ITEMS` items."""

    MAX_ITEMS: ClassVar[int] = 256
    """The most items a member takes in one reward request (push or pull): the server's
    broker splits a larger batch at it, so the aligner's own limit may be larger."""

    items: list[RewardItem] = Field(min_length=1, max_length=MAX_ITEMS)


class RewardResponse(_Reply):
    """Normalized, clipped scores, one per item."""

    scores: list[Annotated[float, Field(allow_inf_nan=False)]]
    query_sha256: str


class PendingQuery(_Reply):
    """A queued (pull-mode) reward query for one client."""

    query_id: int
    items: list[RewardItem]


class RewardAnswer(_Wire):
    """A pull-mode client's answer to one queued query: scores, or the image hashes it lacks."""

    scores: list[Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=RewardRequest.MAX_ITEMS)
    missing: list[str] = Field(default_factory=list, max_length=RewardRequest.MAX_ITEMS)
    error: str | None = Field(default=None, max_length=1000, description="refusal reason")
    retry_after_s: int | None = Field(default=None, ge=0, le=86_400, description="with "
                                      "``error``: the member refused for load (its rate limit "
                                      "or budget), as a push member's 429 with this "
                                      "Retry-After")


class AuditBudget(_Reply):
    """An auditor's membership-query budget (``GET /v1/audit/budget``): scored items it may
    still ask for in the sliding window."""

    auditor: str
    budget: int = Field(description="scored items per window (the server's audit.query_budget)")
    used: int = Field(description="items scored for this auditor in the current window")
    left: int
    window_s: float


class MissingImages(_Reply):
    """409 from a client app: resend these images' bytes."""

    detail: str
    missing: list[str]


class Work(_Reply):
    """What a client has to do now (``GET /v1/work``): open rounds that still wait for its
    message, and its queued (pull-mode) reward queries."""

    rounds: list[int] = Field(default_factory=list)
    queries: list[PendingQuery] = Field(default_factory=list)
