"""The identity lifecycle's endpoints: ``POST /v1/identity/rotate`` (any signed identity),
``GET /v1/members``, ``POST /v1/members/{name}/revoke`` and ``POST /v1/roster/reload`` (the
operator role or the admin token) — an ``APIRouter`` that ``create_app`` includes."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path

from sdk.serving import for_roles
from sdk.wire import KeyRotation, MemberInfo, Revocation, RosterSync
from server_app._identity._access import ADMIN, SIGNED_ROLES, Access, Identity
from server_app._identity._identities import Identities

__all__ = ["identity_router"]

_NAME = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def identity_router(identities: Identities, access: Access) -> APIRouter:
    """The endpoints over ``identities``."""
    router = APIRouter(prefix="/v1", tags=["identity"])
    Caller = Annotated[Identity, Depends(access.caller)]
    operators = for_roles("operator", ADMIN)

    @router.post("/identity/rotate", response_model=MemberInfo,
                 openapi_extra=for_roles(*SIGNED_ROLES))
    def rotate(caller: Caller, body: KeyRotation) -> MemberInfo:
        """Switch the caller (signed with its current key) to a new key that signed the
        rotation message; the old key is refused from the next request on. Repeating a
        finished rotation (signed with the new key) returns the same answer."""
        return identities.rotate(caller.caller_id, body)

    @router.get("/members", response_model=list[MemberInfo], openapi_extra=operators)
    def members(_: Caller) -> list[MemberInfo]:
        """Every identity on the roster, enrolled or revoked: role, state, key fingerprint,
        last seen and the rounds it took part in (operator or admin)."""
        return identities.members()

    @router.post("/members/{name}/revoke", response_model=MemberInfo, openapi_extra=operators)
    def revoke(caller: Caller, name: Annotated[str, _NAME],
               body: Annotated[Revocation | None, Body()] = None) -> MemberInfo:
        """Revoke an identity now (operator or admin): its next request gets 403, it is dropped
        from every open round (a refusal with reason ``revoked``) and from later default
        rounds, and its entry leaves the roster file. Idempotent."""
        return identities.revoke(name, actor=caller.caller_id,
                                 reason="" if body is None else body.reason)

    @router.post("/roster/reload", response_model=RosterSync, openapi_extra=operators)
    def reload(caller: Caller) -> RosterSync:
        """Read the roster file again now (the server also does so by itself within a tick
        of any change): new entries may enroll, names no longer listed are revoked."""
        return identities.sync_roster(actor=caller.caller_id)

    return router
