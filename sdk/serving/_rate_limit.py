"""The one refusal for a caller past a cap, its rate or its budget, the same in both apps:
HTTP 429 with a ``detail`` and ``Retry-After``."""

from __future__ import annotations

import time
from collections import deque

__all__ = ["RateLimited"]

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
        else count this call. The caller holds ``calls`` and any lock it needs."""
        now = time.monotonic()
        while calls and calls[0] <= now - _WINDOW_S:
            calls.popleft()
        if len(calls) >= limit:
            raise RateLimited(f"{caller} sent {len(calls)} requests in the last minute (limit "
                              f"{limit} per minute)")
        calls.append(now)
