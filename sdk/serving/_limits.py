"""Bounded cost per caller, in either app: how many requests and long polls one identity may
have in progress, how many requests without a verified identity the app holds at once, and
how many threads run the blocking work.

A request without credentials counts against one *anonymous* cap shared by every such caller;
one with a signature or a bearer token counts against a separate *unverified* cap until
``SizeLimit`` has checked its headers (before any body byte), and from then on against its
sender's caps: a caller can exhaust only its own quota, nobody can spend another identity's
quota without its key, and an anonymous flood does not lock the identified callers out.
Beyond a cap, a per-minute rate or a query budget the answer is the one refusal of both apps,
``RateLimited``: 429 with a ``detail`` and ``Retry-After``, which fedmor's clients retry.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdk.wire import HEADER_SIGNATURE

if TYPE_CHECKING:  # the web framework loads with the app: a settings file's reader needs none
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.requests import HTTPConnection
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Limiter", "RateLimited", "RequestLimits", "install_limits"]

_SLOTS = "fedmor.slots"  # the scope key of a request's held slots
_UNLIMITED = frozenset({"/v1/health"})  # liveness: answered on the event loop, nothing held
_CREDENTIALS = frozenset({HEADER_SIGNATURE.encode(), b"authorization"})


_WINDOW_S = 60.0
_MINUTE_S = 60  # the rate windows and query budgets are counted per minute


class RateLimited(RuntimeError):
    """A caller has too many requests in progress, or exceeded its rate limit or query budget
    (HTTP 429); ``retry_after_s`` is the ``Retry-After`` its answer carries."""

    def __init__(self, message: str, *, retry_after_s: int = _MINUTE_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @staticmethod
    def per_minute(calls: deque[float], limit: int, caller: str) -> None:
        """The one per-minute rate limit of both apps: refuse (raise) when ``calls`` (the
        caller's monotonic call times, oldest first) holds ``limit`` calls of the last minute,
        with the seconds until the oldest leaves it as ``Retry-After`` (a caller waits no
        longer than it must), else count this call. The caller holds ``calls`` and any lock it
        needs."""
        now = time.monotonic()
        while calls and calls[0] <= now - _WINDOW_S:
            calls.popleft()
        if len(calls) >= limit:
            raise RateLimited(f"{caller} sent {len(calls)} requests in the last minute (limit "
                              f"{limit} per minute)",
                              retry_after_s=max(1, math.ceil(calls[0] + _WINDOW_S - now)))
        calls.append(now)


class RequestLimits(BaseModel):
    """Per-identity and global caps on requests in progress (``[limits]`` in either app's
    settings); each must stay below ``worker_threads`` so no one caller can take every thread."""

    model_config = ConfigDict(extra="forbid")

    per_identity: int = Field(
        default=16, ge=1, description="requests one authenticated identity (member, aligner, "
        "operator, auditor, the admin token) may have in progress at once, long polls "
        "included; beyond: 429")
    long_polls_per_identity: int = Field(
        default=4, ge=1, description="held requests (GET /v1/work?wait_s, a stage's wait_s or "
        "wait_next_s) one identity may have open at once; beyond: 429 (a member's client "
        "holds one at a time)")
    anonymous: int = Field(
        default=32, ge=1, description="requests without credentials in progress at once, all "
        "such callers together (enrollment, /metrics, /v1/ready; /v1/health is not counted); "
        "beyond: 429")
    unverified: int = Field(
        default=512, ge=1, description="requests with a signature or bearer token not yet "
        "checked, all callers together (a check takes no network wait: the whole consortium's "
        "burst at a stage fits); beyond: 429")
    worker_threads: int = Field(
        default=64, ge=2, le=4096, description="threads that run blocking work (store reads "
        "and writes, signature checks, sync endpoints)")
    retry_after_s: int = Field(default=1, ge=1, le=3600,
                               description="the Retry-After of a 429 from these caps")

    @model_validator(mode="after")
    def _below_the_pool(self) -> RequestLimits:
        if max(self.per_identity, self.anonymous) >= self.worker_threads:
            raise ValueError("limits.per_identity and limits.anonymous must be below "
                             "limits.worker_threads: one caller (or all anonymous ones) could "
                             "otherwise hold every thread")
        if self.long_polls_per_identity > self.per_identity:
            raise ValueError("limits.long_polls_per_identity cannot exceed "
                             "limits.per_identity (a long poll is a request in progress)")
        return self


class _Slots:
    """What one request holds: the anonymous slot until it is authenticated, then its
    identity's slot, and a long-poll slot while it waits."""

    __slots__ = ("identity", "pool", "waits")

    def __init__(self, pool: str) -> None:
        self.pool: str | None = pool  # "anonymous" or "unverified" until admitted
        self.identity: str | None = None
        self.waits = 0


class Limiter:
    """The counters behind :class:`RequestLimits`; thread-safe (admissions happen on the
    event loop, in worker threads too)."""

    def __init__(self, cfg: RequestLimits) -> None:
        self.cfg = cfg
        self._lock = threading.Lock()
        self._pools: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._waits: Counter[str] = Counter()

    def _enter(self, pool: str) -> _Slots | None:
        with self._lock:
            if self._pools[pool] >= getattr(self.cfg, pool):
                return None
            self._pools[pool] += 1
        return _Slots(pool)

    def _leave(self, slots: _Slots) -> None:
        with self._lock:
            if slots.pool is not None:
                _drop(self._pools, slots.pool)
            if slots.identity is not None:
                _drop(self._requests, slots.identity)
                for _ in range(slots.waits):
                    _drop(self._waits, slots.identity)

    def admit(self, scope: Scope, identity: str) -> None:
        """Count the request of ``scope`` against ``identity`` (call only once its signature
        or bearer token checked out), freeing its unverified slot; ``RateLimited`` at the
        identity's cap."""
        slots: _Slots | None = scope.get(_SLOTS)
        if slots is None or slots.identity == identity:
            return
        with self._lock:
            if self._requests[identity] >= self.cfg.per_identity:
                raise RateLimited(f"identity {identity} already has {self.cfg.per_identity} "
                                  "requests in progress (limits.per_identity); retry when one "
                                  "has finished", retry_after_s=self.cfg.retry_after_s)
            self._requests[identity] += 1
            if slots.identity is not None:  # cannot happen: one sender per request
                _drop(self._requests, slots.identity)
            slots.identity = identity
            if slots.pool is not None:
                _drop(self._pools, slots.pool)
                slots.pool = None

    def hold_wait(self, request: HTTPConnection, identity: str) -> None:
        """Count a long poll of ``identity`` until ``request`` ends; ``RateLimited`` at its cap."""
        slots: _Slots | None = request.scope.get(_SLOTS)
        if slots is None:
            return
        if slots.identity != identity:
            raise RuntimeError("hold_wait before admit: the request's identity is not counted")
        with self._lock:
            if self._waits[identity] >= self.cfg.long_polls_per_identity:
                raise RateLimited(f"identity {identity} already holds "
                                  f"{self.cfg.long_polls_per_identity} long polls "
                                  "(limits.long_polls_per_identity); retry when one has "
                                  "returned", retry_after_s=self.cfg.retry_after_s)
            self._waits[identity] += 1
            slots.waits += 1

    def in_progress(self) -> dict[str, float]:
        """Requests in progress now, by pool (no identity named: ``/metrics`` shows these)."""
        with self._lock:
            return {"anonymous": self._pools["anonymous"],
                    "unverified": self._pools["unverified"],
                    "identified": sum(self._requests.values()),
                    "long_polls": sum(self._waits.values())}


def _drop(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


class _Middleware:
    """ASGI: give each request its slots (429 at once when its pool is full) and free them
    when it ends, however it ends."""

    def __init__(self, app: ASGIApp, *, limiter: Limiter) -> None:
        self.app, self.limiter = app, limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _UNLIMITED:
            await self.app(scope, receive, send)
            return
        names = {name for name, _ in scope["headers"]}
        pool = "unverified" if names & _CREDENTIALS else "anonymous"
        slots = self.limiter._enter(pool)
        if slots is None:
            from sdk.serving._errors import send_error

            await send_error(send, 429, f"the app holds {getattr(self.limiter.cfg, pool)} "
                             f"requests of this kind (limits.{pool}); retry shortly",
                             retry_after_s=self.limiter.cfg.retry_after_s)
            return
        scope[_SLOTS] = slots
        try:
            await self.app(scope, receive, send)
        finally:
            self.limiter._leave(slots)


async def _rate_limited(request: Request, exc: Exception) -> JSONResponse:
    from fastapi.responses import JSONResponse

    assert isinstance(exc, RateLimited)
    return JSONResponse({"detail": str(exc)}, status_code=429,
                        headers={"retry-after": str(exc.retry_after_s)})


def install_limits(app: FastAPI, limiter: Limiter) -> None:
    """Count every request of ``app`` with ``limiter`` (add it last, as the outermost
    middleware: a refused request costs nothing more), and answer every ``RateLimited`` an
    endpoint raises with its 429 and ``Retry-After``."""
    app.add_exception_handler(RateLimited, _rate_limited)
    app.add_middleware(_Middleware, limiter=limiter)
