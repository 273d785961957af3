"""What an operator's tooling reads from either app: readiness (``/v1/ready``: the database
answers) and Prometheus metrics (``/metrics``).

Each app gets its own ``CollectorRegistry``: several apps in one process (tests) keep their
own counts. Gauges that describe stored state (rounds by status, refusals by reason) are read
from the store at scrape time, so they survive restarts and never drift from it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sdk.storage import SQLiteFile
from sdk.wire import HEADER_SIGNATURE, signature_checks

__all__ = ["StoredGauge", "install_ops"]


class StoredGauge:
    """A gauge family computed at scrape time: ``read()`` returns {label value: value}.
    ``per_member``: its label names members, so only the operator reads it by label; anyone
    else gets the sum (who judged what is not public)."""

    def __init__(self, name: str, doc: str, label: str,
                 read: Callable[[], dict[str, float]], *, per_member: bool = False) -> None:
        self.name, self.doc, self.label, self.read = name, doc, label, read
        self.per_member = per_member

    @classmethod
    def counting(cls, name: str, doc: str, label: str, store: SQLiteFile,
                 sql: str, *, per_member: bool = False) -> StoredGauge:
        """A gauge from a ``SELECT label, count ... GROUP BY`` query on ``store``."""
        def read() -> dict[str, float]:
            return {str(k): float(v) for k, v in store.read(sql)}  # type: ignore[arg-type]

        return cls(name, doc, label, read, per_member=per_member)


class _Collector:
    """The stored gauges, by label (``full``: the operator's view) or with each per-member
    gauge summed over its members; ``also``: other collectors to include."""

    def __init__(self, gauges: Iterable[StoredGauge], *, full: bool,
                 also: Iterable[Any] = ()) -> None:
        self.gauges, self.full, self.also = list(gauges), full, list(also)

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        for other in self.also:
            yield from other.collect()
        for g in self.gauges:
            if g.per_member and not self.full:
                yield GaugeMetricFamily(g.name, f"{g.doc} (summed over members)",
                                        value=sum(g.read().values()))
                continue
            family = GaugeMetricFamily(g.name, g.doc, labels=[g.label])
            for value, count in sorted(g.read().items()):
                family.add_metric([value], count)
            yield family


class _RequestMetrics:
    """ASGI middleware: requests by method, route template and status, and their latency."""

    def __init__(self, app: ASGIApp, *, requests: Any, latency: Any) -> None:
        self.app, self.requests, self.latency = app, requests, latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")  # the template: no ids in labels
            self.requests.labels(scope["method"], path, str(status[0])).inc()
            self.latency.labels(scope["method"], path).observe(time.perf_counter() - started)


def install_ops(app: FastAPI, *, prefix: str, store: SQLiteFile,
                gauges: Iterable[StoredGauge] = (),
                full_view: Callable[[Request], Awaitable[bool]] | None = None) -> None:
    """Add ``GET /v1/ready`` (503 with the reason unless the database answers) and
    ``GET /metrics`` (Prometheus text: ``{prefix}_requests_total``,
    ``{prefix}_request_seconds`` and the ``gauges``) to ``app``. With ``full_view``, one rule
    for every caller: those it accepts (it authenticates a request's credentials) read the
    per-member gauges by member, and everyone else (anonymous or signed) reads their sums."""
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Histogram,
        generate_latest,
    )

    registry = CollectorRegistry()
    requests = Counter(f"{prefix}_requests", "HTTP requests", ["method", "route", "status"],
                       registry=registry)
    latency = Histogram(f"{prefix}_request_seconds", "HTTP request latency",
                        ["method", "route"], registry=registry)
    gauges = [*gauges, StoredGauge(f"{prefix}_signature_checks", "request signatures "
                                   "verified by this process since it started, by result",
                                   "result", signature_checks)]
    registry.register(_Collector(gauges, full=True))
    public = CollectorRegistry()
    public.register(_Collector(gauges, full=False, also=(requests, latency)))
    app.add_middleware(_RequestMetrics, requests=requests, latency=latency)

    @app.get("/v1/ready", tags=["meta"], responses={503: {"description": "not ready"}})
    def ready() -> JSONResponse:
        """Readiness probe: the database answers a read and takes a write lock."""
        problem = store.ready()
        if problem is not None:
            return JSONResponse({"detail": f"database not ready: {problem}"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["meta"], response_class=Response,
             responses={200: {"content": {CONTENT_TYPE_LATEST: {}},
                              "description": "Prometheus text format"}})
    async def metrics(request: Request) -> Response:
        """Prometheus metrics: per-member series for the callers ``full_view`` accepts (the
        operator), sums for everyone else."""
        credentials = "authorization" in request.headers or HEADER_SIGNATURE in request.headers
        if full_view is None:
            chosen = registry
        else:
            chosen = registry if credentials and await full_view(request) else public
        return Response(await run_in_threadpool(generate_latest, chosen),
                        media_type=CONTENT_TYPE_LATEST)
