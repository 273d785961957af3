"""The operator's endpoints beside the identity ones: live roster additions (``POST
/v1/roster``), cancelling a round, the router's version history, and the per-member report
(what each member's site policy refused, the DP budget its updates spent) — an ``APIRouter``
that ``create_app`` includes before the router-version routes (``GET /v1/router`` must not be
read as a version number)."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path

from sdk.secagg import composed_epsilon
from sdk.wire import (
    MemberRefusal,
    MemberReport,
    NotFoundError,
    RosterAdd,
    RosterAdded,
    RoundCancel,
    RoundInfo,
    RouterVersionInfo,
)
from server_app._access import Access, Identity
from server_app._identity import Identities
from server_app._rounds import RoundManager
from server_app._router_api import _version_info
from server_app._store import Store

__all__ = ["member_reports", "operator_router"]

_NAME = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def member_reports(identities: Identities, rounds: list[RoundInfo],
                   store: Store) -> list[MemberReport]:
    """Every identity with its refusals and the DP rounds its update went into (a finished DP
    round it neither refused nor dropped out of), composed at the smallest delta of those
    rounds: the largest epsilon any of them would report."""
    refusals: dict[str, list[MemberRefusal]] = {}
    dp: dict[str, list[tuple[float, float, float]]] = {}
    for info in rounds:
        refused = set()
        for r in info.refusals:
            refused.add(r.client_id)
            refusals.setdefault(r.client_id, []).append(MemberRefusal(
                round_id=info.round_id, reason=r.reason, detail=r.detail, at=r.at))
        if info.status == "finished" and info.dp is not None:
            for client_id in set(info.participants) - refused - set(info.dropouts):
                dp.setdefault(client_id, []).append(
                    (info.dp.noise_multiplier, info.dp.sample_rate, info.dp.delta))
    bounds = {str(c["client_id"]): c["clip_bound"] for c in store.clients(None)}
    out = []
    for member in identities.members():
        cid = member.client_id or ""
        terms = dp.get(cid, [])
        delta = min((t[2] for t in terms), default=None)
        spent = None if delta is None else composed_epsilon([(t[0], t[1]) for t in terms],
                                                            delta)
        out.append(MemberReport(**member.model_dump(), clip_bound=bounds.get(cid),
                                refusals=refusals.get(cid, []), dp_rounds=len(terms),
                                epsilon_spent=spent, delta=delta))
    return out


def operator_router(identities: Identities, rounds: RoundManager, store: Store,
                    access: Access) -> APIRouter:
    """The endpoints, each for the operator role or the admin token."""
    router = APIRouter(prefix="/v1", tags=["operator"])
    Operator = Annotated[Identity, Depends(access.operator)]

    @router.post("/roster", response_model=RosterAdded)
    def roster_add(caller: Operator, req: RosterAdd) -> RosterAdded:
        """Add an identity to the running server's roster (and its roster file) and return
        its one-time enrollment token; it may enroll at once. A name that exists is refused
        (409) unless ``replace``: then the old identity is revoked first."""
        return identities.add(req, actor=caller.caller_id)

    @router.post("/rounds/{round_id}/cancel", response_model=RoundInfo)
    def cancel(caller: Operator, round_id: Annotated[int, Path(ge=1, le=2**62)],
               body: Annotated[RoundCancel | None, Body()] = None) -> RoundInfo:
        """End an open round as failed now (409 if it already ended)."""
        return rounds.cancel(round_id, caller.caller_id, "" if body is None else body.reason)

    @router.get("/router", response_model=list[RouterVersionInfo])
    def history(_: Operator) -> list[RouterVersionInfo]:
        """Every router version, oldest first (a rollback is a new version)."""
        latest = store.latest_version() or 0
        return [_version_info(store, v) for v in range(1, latest + 1)]

    @router.get("/reports/members", response_model=list[MemberReport])
    def reports(_: Operator) -> list[MemberReport]:
        """Every identity with the rounds its site policy refused (rule and words) and the
        DP budget its updates spent."""
        return member_reports(identities, rounds.list(), store)

    @router.get("/reports/members/{name}", response_model=MemberReport)
    def report(_: Operator, name: Annotated[str, _NAME]) -> MemberReport:
        """One identity's report (404 if the server never knew the name)."""
        for found in member_reports(identities, rounds.list(), store):
            if found.name == name:
                return found
        raise NotFoundError(f"no identity named {name!r}")

    return router
