"""Operations: ``GET /v1/health`` here, and ``GET /v1/ready`` and ``GET /metrics`` (with the
server's gauges over its store) from ``sdk.wire.install_ops``."""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.

import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request

from sdk import __version__
from sdk.serving import Limiter, StoredGauge, install_ops
from sdk.wire import Health
from server_app._rewards._broker import RewardBroker
from server_app._store import Store

__all__ = ["install_server_ops", "meta_router"]


def install_server_ops(app: FastAPI, store: Store, limits: Limiter, broker: RewardBroker,
                       full_view: Callable[[Request], Awaitable[bool]]) -> None:
    """Readiness and Prometheus metrics, with rounds, refusals and queued queries as gauges,
    the requests in progress by ``limits``' pool and the ``broker``'s waits; the queries by
    member for the callers ``full_view`` accepts only."""
    install_ops(app, prefix="fedmor_server", store=store, full_view=full_view, gauges=[
        StoredGauge("fedmor_server_requests_in_progress", "requests in progress by pool "
                    "(anonymous, unverified, identified; long_polls: held ones among the "
                    "identified)", "pool", limits.in_progress),
        StoredGauge("fedmor_server_broker_waits", "the reward broker's waits since the "
                    "server started: push queries that waited for a free slot of their member "
                    "(slot_waits), sent again after the member's 429 (resends), store reads of "
                    "waiting pull queries (pull_reads)", "event",
                    lambda: {"slot_waits": broker.slot_waits, "resends": broker.resends,
                             "pull_reads": broker.pull_reads}),
        StoredGauge.counting("fedmor_server_rounds", "rounds by status", "status", store,
                             "SELECT status, COUNT(*) FROM rounds GROUP BY status"),
        StoredGauge.counting("fedmor_server_refusals", "members' policy refusals of rounds, "
                             "by reason", "reason", store,
                             "SELECT reason, COUNT(*) FROM round_refusals GROUP BY reason"),
        StoredGauge.counting("fedmor_server_reward_queries", "queued (pull-mode) reward "
                             "queries by member", "client_id", store,
                             "SELECT client_id, COUNT(*) FROM reward_queries GROUP BY client_id",
                             per_member=True),
        # A round announced as captured that ended (finished or failed) with capture mode off
        # (see RoundManager._captured): the auditor's capture lacks a round its members agreed to.
        StoredGauge.counting("fedmor_server_capture_missed", "rounds announced as captured "
                             "that ended with capture mode off", "action", store,
                             "SELECT 'capture_missed', COUNT(*) FROM audit "
                             "WHERE action='capture_missed'"),  # 0 too: a row either way
    ])


def meta_router(recovered_rounds: list[int]) -> APIRouter:
    """``GET /v1/health``: the process answers (no store read; ``/v1/ready`` does that), since
    when, and which open rounds it resumed at start (``recovered_rounds``): the operator sees
    a server restart even when every round went on."""
    started_at = time.time()
    router = APIRouter(tags=["meta"])

    @router.get("/v1/health", response_model=Health)
    async def health() -> Health:
        """Liveness probe, answered on the event loop: it needs no thread, so a drained
        thread pool does not make a live server look dead."""
        return Health(app="fedmor-server", version=__version__, started_at=started_at,
                      recovered_rounds=recovered_rounds)

    return router
