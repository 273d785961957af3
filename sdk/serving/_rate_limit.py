"""One refusal for a caller past its rate or budget, the same in both apps: HTTP 429 with a
``detail`` and ``Retry-After``."""

from __future__ import annotations

import time
from collections import deque

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["RateLimited"]

_WINDOW_S = 60.0
_RETRY_AFTER_S = 60  # the rate windows are a minute long


class RateLimited(RuntimeError):
    """A caller exceeded its rate limit or query budget (HTTP 429)."""

    @staticmethod
    def per_minute(calls: deque[float], limit: int, caller: str) -> None:
        """The one per-minute rate limit of both apps: refuse (raise) when ``calls`` (the
        caller's monotonic call times, oldest first) holds ``limit`` calls of the last minute,
        else count this call. The caller holds ``calls`` and any lock it needs."""
        now = time.monotonic()
        while calls and calls[0] <= now - _WINDOW_S:
            calls.popleft()
        if len(calls) >= limit:
            raise RateLimited(f"{caller} sent {len(calls)} requests in the last minute (limit "
                              f"{limit} per minute)")
        calls.append(now)

    @staticmethod
    def install(app: FastAPI) -> None:
        """Answer :class:`RateLimited` in ``app`` with 429, its message as ``detail`` and a
        ``Retry-After``."""
        app.add_exception_handler(RateLimited, _rate_limited)


async def _rate_limited(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=429,
                        headers={"retry-after": str(_RETRY_AFTER_S)})
