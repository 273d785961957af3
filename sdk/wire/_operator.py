"""The operator's endpoints on the wire: live roster changes, cancelling a round, and the
per-member report (what each member's site policy refused, the DP budget its updates spent)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sdk.wire._identity import MemberInfo, Role
from sdk.wire._schemas import _NAME, _OneLine, _PublicKey, _Reply, _Wire

__all__ = ["MemberRefusal", "MemberReport", "RosterAdd", "RosterAdded", "RoundCancel"]


class RosterAdd(_Wire):
    """``POST /v1/roster``: add an identity to the running server's roster."""

    name: str = Field(pattern=_NAME)
    public_key: _PublicKey
    role: Role = "member"
    replace: bool = Field(default=False, description="a name that exists is refused unless "
                          "set: then its identity is revoked and the new key added under the "
                          "name (a new identity, a new client id)")


class RosterAdded(_Reply):
    """The new entry and its one-time enrollment token (the server keeps only its hash)."""

    name: str
    role: str
    token: str = Field(description="one-time enrollment token: hand it to the site")
    replaced: str | None = Field(default=None, description="the client id revoked to make "
                                 "room (--replace), if it was enrolled")


class RoundCancel(_Wire):
    """``POST /v1/rounds/{id}/cancel``: end an open round as failed."""

    reason: Annotated[_OneLine, Field(max_length=500)] = Field(default="")


class MemberRefusal(_Reply):
    """One round a member's site policy refused."""

    round_id: int
    reason: str = Field(description="the policy rule (round_kind, participants, dp, ...)")
    detail: str
    at: float


class MemberReport(MemberInfo):
    """One identity with what the server knows of its site policy's decisions (``GET
    /v1/reports/members``)."""

    refusals: list[MemberRefusal] = Field(default_factory=list, description="rounds its site "
                                          "policy refused, oldest first")
    dp_rounds: int = Field(default=0, description="finished DP rounds its update went into")
    delta: float | None = Field(default=None, description="the smallest delta of those rounds, "
                                "at which ``epsilon_spent`` is composed")
