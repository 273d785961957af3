"""``GET /v1/identity/rotations``: every key rotation the server switched, with the old key's
endorsement of the new one, so a member that checks rounds against its own roster copy can
follow its peers' rotations without trusting the server (``sdk.membership.follow_rotations``)."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated

from fastapi import APIRouter, Depends

from sdk.serving import for_roles
from sdk.wire import RotationRecord
from server_app._identity._access import Access
from server_app._identity._identities import Identities

__all__ = ["rotations_router"]


def rotations_router(identities: Identities, access: Access) -> APIRouter:
    """The endpoint over ``identities``."""
    router = APIRouter(prefix="/v1", tags=["identity"])

    @router.get("/identity/rotations", response_model=list[RotationRecord],
                openapi_extra=for_roles("member"))
    def rotations(_: Annotated[str, Depends(access.caller_id)]) -> list[RotationRecord]:
        """Every rotation, oldest first (members): client id, old and new public key, time,
        and the old key's base64 signature of 'fedmor key endorsement\\n{client_id}\\n{old}\\n
        {new}'. A member accepts a new key only along such signatures from a key it knows."""
        return identities.rotations()

    return router
