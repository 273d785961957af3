"""The aligner role's endpoints: ``POST /v1/rewards``, ``POST /v1/rewards/feedback``,
``GET /v1/rewards/stats`` and ``GET /v1/rewards/progress`` (an ``APIRouter`` that
``create_app`` includes)."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from sdk.serving import for_roles
from sdk.wire import (
    AlignerFeedback,
    AlignerFeedbackAck,
    AlignerRequest,
    AlignerResponse,
    AlignerStats,
    AlignmentStep,
)
from server_app._identity._access import ADMIN, Access
from server_app._rewards._service import AlignmentService

__all__ = ["rewards_router"]

_429: dict[int | str, dict[str, Any]] = {429: {"description": "Too many requests from this aligner", "content": {
    "application/json": {"schema": {"type": "object", "properties": {
        "detail": {"type": "string"}}, "required": ["detail"]}}}}}


def rewards_router(service: AlignmentService, access: Access) -> APIRouter:
    """The endpoints over ``service``; only a signed ``aligner`` identity may call them (the
    stats also take the admin bearer token)."""
    router = APIRouter(prefix="/v1/rewards", tags=["alignment"])
    Aligner = Annotated[str, Depends(access.caller_id)]
    readers = for_roles("aligner", "operator", ADMIN)

    @router.post("", response_model=AlignerResponse, responses=_429,
                 openapi_extra=for_roles("aligner", upload=True))
    async def rewards(aligner: Aligner, req: AlignerRequest) -> AlignerResponse:
        """One normalized, clipped reward per item, chosen by ``method`` (MoR by default: the
        server's router picks one member per item and asks it). When the server lacks an
        image, the answer lists it in ``missing`` (no rewards): send the batch again with
        those images' bytes in ``image_b64``."""
        service.admit(aligner, len(req.items))
        return await service.score(req)

    @router.post("/feedback", response_model=AlignerFeedbackAck,
                 openapi_extra=for_roles("aligner"))
    async def feedback(_: Aligner, fb: AlignerFeedback) -> AlignerFeedbackAck:
        """The trainer's loss after ``step``: the online router's Neural TS update, applied
        once per step (a repeated step is acknowledged with ``applied`` false)."""
        return await service.feedback(fb)

    @router.get("/stats", response_model=AlignerStats, openapi_extra=readers)
    def stats(_: Aligner) -> AlignerStats:
        """Counters since the server started (batches, items, failures, empty and off-format
        completions, feedback) and the online router's step, last loss and version."""
        return service.stats()

    @router.get("/progress", response_model=list[AlignmentStep], openapi_extra=readers)
    def progress(_: Aligner) -> list[AlignmentStep]:
        """The aligner's applied feedback steps, oldest first (the latest 2000): loss, the
        mean reward and KL the trainer logged, and the bandit feedback r_t."""
        return service.progress()

    return router

