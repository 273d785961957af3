"""``POST /v1/identity/clip-bound``: a member announces the clip bound of its current scorer;
``POST /v1/identity/round-terms``: which rounds its site policy takes part in;
``POST /v1/identity/status``: that it started, or what kept it from starting (an ``APIRouter``
that ``create_app`` includes).

A member that swaps its reward model for one with another normalizer would otherwise have every
answer outside its enrollment-time bound refused. The announcement is signed, changes only the
caller's own row, is audited, and the broker judges the next answer by it.
"""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from sdk.serving import for_roles
from sdk.wire import ClipBoundAck, ClipBoundAnnouncement, MemberInfo, PayloadError
from server_app._identity._access import Access
from server_app._rewards._broker import RewardBroker
from server_app._settings import ServerSettings
from server_app._store import Store

__all__ = ["check_clip_bound", "clip_bound_router"]

_log = logging.getLogger("fedmor.server")


class _StartReport(BaseModel):
    """``POST /v1/identity/status``: ``problem`` None for a clean start, else the member's
    start-up checks that failed, one plain line (setting keys and the kind of problem)."""

    model_config = ConfigDict(extra="forbid")

    # One printable line: it reaches the server's log and the operator's terminal.
    problem: str | None = Field(default=None, min_length=1, max_length=500,
                                pattern=r"^[^\x00-\x1f\x7f]*$")


def check_clip_bound(clip_bound: float | None, cfg: ServerSettings) -> None:
    """Refuse (422) a bound above the consortium's ``max_clip_bound``."""
    if clip_bound is not None and clip_bound > cfg.max_clip_bound:
        raise PayloadError(f"clip_bound {clip_bound:g} is above this consortium's maximum "
                           f"{cfg.max_clip_bound:g} (server setting max_clip_bound): rescale "
                           "the reward model's normalizer or ask the operator")


def clip_bound_router(store: Store, broker: RewardBroker, access: Access,
                      cfg: ServerSettings) -> APIRouter:
    """The endpoint over ``store``; ``broker`` re-reads the caller's row at its next query."""
    router = APIRouter(prefix="/v1", tags=["identity"])

    @router.post("/identity/clip-bound", response_model=ClipBoundAck,
                 openapi_extra=for_roles("member"))
    def announce(caller: Annotated[str, Depends(access.caller_id)],
                 body: ClipBoundAnnouncement) -> ClipBoundAck:
        """Set the caller's own clip bound (members): every score it answers from now on
        must lie in [-clip_bound, clip_bound]. A bound above the server's ``max_clip_bound``
        gets 422 and changes nothing. Repeating an announcement changes nothing."""
        check_clip_bound(body.clip_bound, cfg)
        previous = store.set_clip_bound(caller, body.clip_bound)
        broker.reread(caller)
        if previous != body.clip_bound:
            _log.info("member %s announced clip bound %g (was %s)", caller, body.clip_bound,
                      "none" if previous is None else f"{previous:g}")
        return ClipBoundAck(client_id=caller, clip_bound=body.clip_bound, previous=previous)

    @router.post("/identity/round-terms", status_code=204, openapi_extra=for_roles("member"))
    def announce_terms(caller: Annotated[str, Depends(access.caller_id)],
                       body: Annotated[dict[str, Any], Body()]) -> None:
        """Set the caller's own round terms (members; ``MemberInfo.round_terms``): the
        operator's ``fedmor members list`` shows them, so a round a member's policy would
        refuse is seen before it is opened. Informative only: the member still checks every
        round itself."""
        try:
            terms = MemberInfo.announced_terms(body)
        except ValueError as exc:
            raise PayloadError(f"round terms: {exc}") from exc
        if store.set_round_terms(caller, terms.model_dump_json()):
            _log.info("member %s announced its round terms: %s", caller,
                      terms.model_dump_json())

    @router.post("/identity/status", status_code=204, openapi_extra=for_roles("member"))
    def announce_start(caller: Annotated[str, Depends(access.caller_id)],
                       body: _StartReport) -> None:
        """The caller started (``problem`` null: counted as a restart when it had started
        before, and any known problem cleared) or refused to start (its problem shown in the
        operator's members views until its next clean start)."""
        open_round = next((r.round_id for r in store.round_rows("open")
                           if caller in json.loads(r.spec).get("participants", ())), None)
        if store.set_start(caller, body.problem, open_round):
            _log.info("member %s restarted%s", caller,
                      "" if open_round is None else f" during round {open_round}")
        elif body.problem is not None:
            _log.warning("member %s did not start: %s", caller, body.problem)

    return router
