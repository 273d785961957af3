"""Operations: ``GET /v1/health`` (503 once the background worker died) here, and
``GET /v1/ready`` and ``GET /metrics`` (with the member's gauges over its store) from
``sdk.wire.install_ops``."""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from client_app._store import ClientStore
from sdk import __version__
from sdk.serving import Limiter, StoredGauge, install_ops
from sdk.wire import Health

__all__ = ["install_client_ops", "meta_router"]


def install_client_ops(app: FastAPI, store: ClientStore, limits: Limiter) -> None:
    """Readiness and Prometheus metrics, with rounds, refusals and scored items as gauges,
    and the requests in progress by ``limits``' pool."""
    install_ops(app, prefix="fedmor_client", store=store, gauges=[
        StoredGauge("fedmor_client_requests_in_progress", "requests in progress by pool "
                    "(anonymous, unverified, identified)", "pool", limits.in_progress),
        StoredGauge.counting("fedmor_client_rounds", "this member's rounds by its own status "
                             "(done, refused, abandoned, ...)", "status", store,
                             "SELECT status, COUNT(*) FROM rounds GROUP BY status"),
        StoredGauge.counting("fedmor_client_refusals", "rounds this site's policy refused, by "
                             "reason", "reason", store,
                             "SELECT substr(detail, 1, instr(detail, ':') - 1), COUNT(*) FROM "
                             "rounds WHERE status='refused' GROUP BY 1"),
        StoredGauge.counting("fedmor_client_reward_items", "reward items scored, by caller",
                             "caller", store,
                             "SELECT caller, SUM(items) FROM query_audit GROUP BY caller"),
    ])


def meta_router() -> APIRouter:
    """``GET /v1/health``: reads the app's ``runner_task`` (None when it runs no worker)."""
    router = APIRouter(tags=["meta"])

    @router.get("/v1/health", response_model=Health,
                responses={503: {"model": Health, "description": "the background worker died"}})
    def health(request: Request) -> Any:
        """Liveness probe: 503 once the background worker (rounds, pull-mode queries) died."""
        task = request.app.state.runner_task
        if task is not None and task.done():
            error = None if task.cancelled() else task.exception()
            dead = Health(status="degraded", app="fedmor-client", version=__version__,
                          detail=f"the round and query worker stopped: {error!r}")
            return JSONResponse(dead.model_dump(), status_code=503)
        return Health(app="fedmor-client", version=__version__)

    return router
