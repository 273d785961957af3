"""The operator's endpoints beside the identity ones: live roster additions (``POST
/v1/roster``), cancelling a round, and the per-member report
(what each member's site policy refused, the DP budget its updates spent) — an ``APIRouter``."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path

from sdk.serving import NotFoundError, for_roles
from sdk.wire import MemberRefusal, MemberReport, RosterAdd, RosterAdded, RoundCancel, RoundInfo
from server_app._identity._access import ADMIN, Access, Identity
from server_app._identity._identities import Identities
from server_app._identity._usage import dp_terms_by_member, epsilon_by_member
from server_app._rounds._manager import RoundManager

__all__ = ["member_reports", "operator_router"]

_NAME = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def member_reports(identities: Identities, rounds: list[RoundInfo]) -> list[MemberReport]:
    """Every identity with its refusals in ``rounds`` and the DP budget its updates spent in
    them (the accountant ``GET /v1/members`` uses)."""
    refusals: dict[str, list[MemberRefusal]] = {}
    for info in rounds:
        for r in info.refusals:
            refusals.setdefault(r.client_id, []).append(MemberRefusal(
                round_id=info.round_id, reason=r.reason, detail=r.detail, at=r.at))
    terms = dp_terms_by_member(rounds)
    spent = epsilon_by_member(rounds)
    out = []
    for member in identities.members():
        cid = member.client_id or ""
        mine = terms.get(cid, [])
        out.append(MemberReport(**member.model_dump(exclude={"epsilon_spent"}),
                                epsilon_spent=spent.get(cid), refusals=refusals.get(cid, []),
                                dp_rounds=len(mine),
                                delta=min((d for _, _, d in mine), default=None)))
    return out


def operator_router(identities: Identities, rounds: RoundManager, access: Access) -> APIRouter:
    """The endpoints, each for the operator role or the admin token."""
    router = APIRouter(prefix="/v1", tags=["operator"])
    Operator = Annotated[Identity, Depends(access.caller)]
    operators = for_roles("operator", ADMIN)

    @router.post("/roster", response_model=RosterAdded, openapi_extra=operators)
    def roster_add(caller: Operator, req: RosterAdd) -> RosterAdded:
        """Add an identity to the running server's roster (and its roster file) and return
        its one-time enrollment token; it may enroll at once. A name that exists is refused
        (409) unless ``replace``: then the old identity is revoked first."""
        return identities.add(req, actor=caller.caller_id)

    @router.post("/rounds/{round_id}/cancel", response_model=RoundInfo,
                 openapi_extra=operators)
    def cancel(caller: Operator, round_id: Annotated[int, Path(ge=1, le=2**62)],
               body: Annotated[RoundCancel | None, Body()] = None) -> RoundInfo:
        """End an open round as failed now (409 if it already ended)."""
        return rounds.cancel(round_id, caller.caller_id, "" if body is None else body.reason)

    @router.get("/reports/members", response_model=list[MemberReport],
                openapi_extra=operators)
    def reports(_: Operator) -> list[MemberReport]:
        """Every identity with the rounds its site policy refused (rule and words) and the
        DP budget its updates spent."""
        return member_reports(identities, rounds.list())

    @router.get("/reports/members/{name}", response_model=MemberReport,
                openapi_extra=operators)
    def report(_: Operator, name: Annotated[str, _NAME]) -> MemberReport:
        """One identity's report (404 if the server never knew the name)."""
        for found in member_reports(identities, rounds.list()):
            if found.name == name:
                return found
        raise NotFoundError(f"no identity named {name!r}")

    return router
