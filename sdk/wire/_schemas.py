"""The base of the wire contract: request and response conventions, the 4xx body, and the
schemas of joining the consortium (health, enrollment, a member's clip bound, an auditor's
budget). A round's schemas live in ``_rounds``, a reward query's in ``_rewards``, the router's
in ``_router_config``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sdk.wire._auth import parse_public_key, public_key_b64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "AuditBudget",
    "ClipBoundAck",
    "ClipBoundAnnouncement",
    "EnrollRequest",
    "EnrollResponse",
    "ErrorBody",
    "Health",
    "PayloadError",
]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


def _a_public_key(text: str) -> str:
    parse_public_key(text)  # its ValueError is the caller's 422, never a 500 further in
    return text

_PublicKey = Annotated[str, Field(min_length=40, max_length=64,
                                  description="raw Ed25519 public key, base64"),
                       AfterValidator(_a_public_key)]
"""A public key as it arrives: checked to be one where the request is parsed."""


def _escaped(text: str) -> str:
    # A caller's free text reaches the server's log and other parties' terminals: with a
    # newline or an ANSI escape it could forge log lines or repaint the screen.
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


_OneLine = Annotated[str, AfterValidator(_escaped)]
"""Free text a party sends (a reason, a detail), kept on one line: every control character
(newline, escape) stored escaped. A field bounds it after the escaping,
``Annotated[_OneLine, Field(max_length=n)]``, so the bound holds for the text as stored."""

_SHA256 = r"^[0-9a-f]{64}$"


class _Wire(BaseModel):
    """A request: an unknown field is refused (422), never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class _Reply(BaseModel):
    """A response: a field added by a newer app is ignored, so an older caller (a member app
    not yet upgraded) still parses it. Requests stay strict (``_Wire``)."""

    model_config = ConfigDict(extra="ignore")


class PayloadError(ValueError):
    """A request's content is malformed or illegal (HTTP 422); names the part and the reason
    (a stage message, an image, a push URL)."""


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

    @classmethod
    def of(cls, key: Ed25519PrivateKey, *, name: str, token: str, reward_url: str | None = None,
           clip_bound: float | None = None) -> EnrollRequest:
        """The request of the identity whose private ``key`` this is: every client (member,
        aligner, operator, auditor) enrolls with a request made here."""
        return cls(name=name, token=token, public_key=public_key_b64(key), reward_url=reward_url,
                   clip_bound=clip_bound)


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


class AuditBudget(_Reply):
    """An auditor's membership-query budget (``GET /v1/audit/budget``): scored items it may
    still ask for in the sliding window."""

    auditor: str
    budget: int = Field(description="scored items per window (the server's audit.query_budget)")
    used: int = Field(description="items scored for this auditor in the current window")
    left: int
    window_s: float
