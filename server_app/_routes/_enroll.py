"""Enrollment: ``POST /v1/enroll`` trades a roster token and key for a client id (an
``APIRouter`` that ``create_app`` includes)."""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.

import logging
import uuid

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import APIRouter

from sdk.wire import EnrollRequest, EnrollResponse, check_reward_url, public_key_b64
from server_app._router._config import RouterLineages
from server_app._routes._announce import check_clip_bound
from server_app._settings import ServerSettings
from server_app._store import ConflictError, Store

__all__ = ["ENROLLMENT_REFUSED", "enrollment_router"]

_log = logging.getLogger("fedmor.server")
ENROLLMENT_REFUSED = ("enrollment refused: the name, token and key must match a roster entry "
                      "whose token is unused (ask the consortium operator)")


def enrollment_router(store: Store, key: Ed25519PrivateKey, cfg: ServerSettings,
                      lineages: RouterLineages) -> APIRouter:
    """``POST /v1/enroll`` over ``store``; ``key`` is the server identity it hands out; a
    member without a head in the current router lineage gets one (``lineages.join``)."""
    router = APIRouter(tags=["enrollment"])

    @router.post("/v1/enroll", response_model=EnrollResponse)
    def enroll(req: EnrollRequest) -> EnrollResponse:
        """Trade a one-time token plus the roster's identity key for a client id."""
        if req.reward_url is not None:
            check_reward_url(req.reward_url, allow_http=cfg.allow_http_reward_urls,
                             allow_private=cfg.allow_private_reward_urls)
        check_clip_bound(req.clip_bound, cfg)
        try:
            row, created = store.enroll(name=req.name, token=req.token,
                                        public_key=req.public_key, reward_url=req.reward_url,
                                        new_id=f"c-{uuid.uuid4().hex[:12]}",
                                        clip_bound=req.clip_bound)
        except (PermissionError, ConflictError) as exc:
            # The reason (which names are on the roster, whose token was used) stays in the
            # operator's log; the caller learns only that it was refused.
            _log.warning("enrollment refused: %s", exc)
            raise PermissionError(ENROLLMENT_REFUSED) from None
        if created:
            store.audit(row.client_id, "enrolled", name=req.name)
            _log.info("enrolled %s as %s", req.name, row.client_id)
        if row.role == "member":  # also on a retry: a crash may have come between
            lineages.join(row.name)
        return EnrollResponse(client_id=row.client_id, name=row.name,
                              server_public_key=public_key_b64(key), role=row.role)

    return router
