"""Rounds: open and list rounds, submit a stage's message, fetch a stage's input, refuse a round
(an ``APIRouter`` that ``create_app`` includes), and what each role may read of them.

A member runs a round from its terms (kind, stages, participants and their identity keys, which
SecAgg+ checks key advertisements against, parameters, deadline, DP terms) and its status. It
has no business with rounds it is not in, nor with what other members did there: their
refusals (a member's site policy and reason), who dropped out, or their ids in a failure
reason. The other roles (operator, auditor, aligner, the admin token) see the full status.
Stage inputs need no filter: each member is only ever handed the entries addressed to it.
"""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from sdk.serving import (
    ConflictError,
    Limiter,
    NotFoundError,
    RateLimited,
    SignatureCheck,
    for_roles,
    stage_payload,
)
from sdk.wire import RoundCreate, RoundInfo, RoundRefusal, StageAck, StageBroadcast, StageSubmit
from server_app._identity._access import ADMIN, ANY_ROLE, Access, Identity
from server_app._rounds._manager import RoundManager
from server_app._rounds._state import WHO_LEFT
from server_app._rounds._work import Signal, wait_broadcast

__all__ = ["member_view", "rounds_router", "visible_rounds"]

_log = logging.getLogger("fedmor.server")
_STAGE = Path(pattern=r"^[a-z_]{1,40}$")
_STAGE_BODY = {"required": True, "content": {
    "application/json": {"schema": StageSubmit.model_json_schema()},
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
RoundId = Annotated[int, Path(ge=1, le=2**62)]


OTHER_MEMBER = "another member"


def member_view(info: RoundInfo, member: str) -> RoundInfo:
    """``info`` as ``member`` (a participant) may see it: its own refusal, dropout and failure
    only, and the failure reason without who left and with other participants' ids replaced."""
    error = info.error
    if error is not None:
        error = error.partition(WHO_LEFT)[0]  # other members' causes are theirs
        for other in info.participants:
            if other != member:
                error = error.replace(other, OTHER_MEMBER)
    return info.model_copy(update={
        "refusals": [r for r in info.refusals if r.client_id == member],
        "dropouts": [d for d in info.dropouts if d == member],
        "failures": [f for f in info.failures if f.client_id == member],
        "error": error})


def visible_round(rounds: RoundManager, caller: Identity, round_id: int) -> RoundInfo:
    """Round ``round_id`` as ``caller`` may see it; 403 for a member outside the round."""
    info = rounds.info(round_id)
    if caller.role != "member":
        return info
    if caller.caller_id not in info.participants:
        raise PermissionError(f"client {caller.caller_id} is not a participant of round "
                              f"{round_id}: members read only their own rounds")
    return member_view(info, caller.caller_id)


def visible_rounds(rounds: RoundManager, caller: Identity,
                   status: str | None = None) -> list[RoundInfo]:
    """The rounds ``caller`` may see (a member: the ones it takes part in), oldest first."""
    found = rounds.list(status)
    if caller.role != "member":
        return found
    return [member_view(i, caller.caller_id) for i in found
            if caller.caller_id in i.participants]


def _json_response(model: StageAck | StageBroadcast) -> Response:
    # Serialized once here, not validated again against ``response_model`` (which still
    # documents it): these are the hot endpoints of every stage.
    return Response(model.model_dump_json(), media_type="application/json")


def rounds_router(rounds: RoundManager, access: Access, changes: Signal,
                  limits: Limiter) -> APIRouter:
    """The ``/v1/rounds`` endpoints over ``rounds``: the operator opens rounds, members take
    part in them, any signed caller reads their status. A held stage request waits on
    ``changes`` (bumped when a stage closes), counted by ``limits`` as a long poll."""
    router = APIRouter(prefix="/v1/rounds", tags=["rounds"])

    async def client_check(request: Request) -> SignatureCheck:
        """The signature check of ``request`` to run in the endpoint's own worker thread: the
        round endpoints then cost one thread hop, not two (auth, then the work): each hop is a
        wake-up a busy machine may delay."""
        return await access.check(request)

    Client = Annotated[str, Depends(access.caller_id)]
    ClientCheck = Annotated[SignatureCheck, Depends(client_check)]
    Caller = Annotated[Identity, Depends(access.caller)]

    everyone = for_roles(*ANY_ROLE)
    members = for_roles("member")

    @router.post("", response_model=RoundInfo, openapi_extra=for_roles("operator", ADMIN))
    def create_round(caller: Caller,
                     req: RoundCreate) -> RoundInfo:
        """Open a round (admin token, or a signed ``operator`` identity)."""
        info = rounds.create(req, actor=caller.caller_id)
        _log.info("round %d opened: %s over %d participants", info.round_id, info.kind,
                  len(info.participants))
        return info

    @router.get("", response_model=list[RoundInfo], openapi_extra=everyone)
    def list_rounds(caller: Caller, status: Annotated[str | None, Query(
            pattern="^(open|finished|failed)$")] = None) -> list[RoundInfo]:
        """All rounds, oldest first (a member: the ones it takes part in)."""
        return visible_rounds(rounds, caller, status)

    @router.get("/{round_id}", response_model=RoundInfo, openapi_extra=everyone)
    def get_round(caller: Caller, round_id: RoundId) -> RoundInfo:
        """Status of one round (a member: only of its own rounds, without other members'
        refusals, dropouts or ids)."""
        return visible_round(rounds, caller, round_id)

    @router.post("/{round_id}/stages/{stage}", response_model=StageAck,
                 openapi_extra=for_roles("member", upload=True,
                                             openapi_extra={"requestBody": _STAGE_BODY}))
    async def submit(request: Request, check: ClientCheck, round_id: RoundId,
                     stage: Annotated[str, _STAGE],
                     wait_next_s: Annotated[float, Query(ge=0, le=30)] = 0.0) -> Response:
        """A client's message for one stage; acknowledged once committed. JSON
        ``{"payload": {...}}``, or the raw bytes of a bulk message (masked input, plain update)
        as ``application/octet-stream``. ``wait_next_s`` > 0 also waits (that long at most) for
        the next stage's input and returns it in ``next``."""
        return await _submit(request, check, rounds, changes, limits, round_id, stage,
                             wait_next_s)

    @router.post("/{round_id}/refusal", response_model=RoundInfo, openapi_extra=members)
    def refuse(client: Client, round_id: RoundId, body: RoundRefusal) -> RoundInfo:
        """A participant's site policy refuses the round, or its own half failed (reason
        ``abandoned``): it sends nothing more there; the refusal and its reason show in the
        round's ``refusals`` and ``failures`` (idempotent)."""
        if body.reason == "abandoned":
            _log.warning("client %s abandoned round %d: %s", client, round_id, body.detail)
        else:
            _log.warning("client %s refused round %d: %s (%s)", client, round_id, body.reason,
                         body.detail)
        return rounds.refuse(round_id, client, body.reason, body.detail)

    @router.get("/{round_id}/stages/{stage}", response_model=StageBroadcast,
                openapi_extra=members)
    async def stage_input(request: Request, check: ClientCheck, round_id: RoundId,
                          stage: Annotated[str, _STAGE],
                          wait_s: Annotated[float, Query(ge=0, le=30)] = 0.0) -> Response:
        """The server's input for this client's stage (``ready`` false until available);
        ``wait_s`` > 0 holds the request until it is ready or that time passed."""
        return await _stage_input(request, check, rounds, changes, limits, round_id, stage,
                                  wait_s)

    return router


async def _submit(request: Request, check: SignatureCheck, rounds: RoundManager, changes: Signal,
                  limits: Limiter, round_id: int, stage: str, wait_next_s: float) -> Response:
    """Commit a member's stage message in one worker thread (its signature checked first), then,
    when asked, hold the request for the next stage's input; a refused hold still acks."""
    media, body = request.headers.get("content-type", ""), check.body
    seen = changes.token()  # before the submission: the close it causes is not missed

    def run() -> tuple[StageAck, str, StageBroadcast | None]:
        client = check()  # authentication first, as with a dependency
        ack = rounds.submit(round_id, stage, client, stage_payload(media, body),
                            body_sha256=check.body_sha256)
        following = rounds.next_stage(round_id, stage) if wait_next_s > 0 else None
        if following is None:
            return ack, client, None
        try:
            return ack, client, rounds.broadcast(round_id, following, client)
        except (ConflictError, NotFoundError):  # stored: ack it; a GET explains
            return ack, client, None

    ack, client, nxt = await run_in_threadpool(run)
    if nxt is not None and not (nxt.ready or nxt.round_status != "open"):
        try:
            limits.hold_wait(request, client)
        except RateLimited:  # the message is committed: ack it; the client GETs the next input
            return _json_response(ack)
        nxt = await wait_broadcast(request, rounds, changes, round_id, nxt.stage, client,
                                   wait_next_s, first=(seen, nxt))
    if nxt is not None:
        ack = ack.model_copy(update={"next": nxt})
    return _json_response(ack)


async def _stage_input(request: Request, check: SignatureCheck, rounds: RoundManager,
                       changes: Signal, limits: Limiter, round_id: int, stage: str,
                       wait_s: float) -> Response:
    """A member's stage input, held until it is ready when ``wait_s`` > 0."""
    seen = changes.token()

    def run() -> tuple[str, StageBroadcast]:
        client = check()
        return client, rounds.broadcast(round_id, stage, client)

    client, out = await run_in_threadpool(run)
    if wait_s > 0 and not (out.ready or out.round_status != "open"):
        limits.hold_wait(request, client)
        out = await wait_broadcast(request, rounds, changes, round_id, stage, client, wait_s,
                                   first=(seen, out))
    return _json_response(out)
