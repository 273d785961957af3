"""Retention: how long either app keeps cached images, reward-query rows and audit rows, and
the background task that purges what is older (once at start, then every ``interval_s``).

What a purge may never touch is each app's business (its own ``purge`` function): the rows an
open round needs, the pending reward queries, the query log inside a member's budget window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DAY_S", "Retention", "purging"]

DAY_S = 86_400.0
"""Seconds in a day: retention windows are given in days."""
_log = logging.getLogger("fedmor.retention")


class Retention(BaseModel):
    """How many days each kind of row is kept (the ``[retention]`` settings of both apps)."""

    model_config = ConfigDict(extra="forbid")

    images_days: float = Field(default=30.0, gt=0, description="cached query images (the "
                               "sender resends an image a member no longer holds)")
    queries_days: float = Field(default=90.0, gt=0, description="answered reward-query rows "
                                "(server: the pull-mode queue; member: its query log, never "
                                "inside the reward budget's window)")
    audit_days: float = Field(default=365.0, gt=0, description="audit rows (never those of a "
                              "round still open)")
    interval_s: float = Field(default=3600.0, gt=0, description="how often the purge runs "
                              "(it also runs at start)")

    def cutoff(self, days: float, now: float | None = None) -> float:
        """The time before which rows kept ``days`` days are purged."""
        return (time.time() if now is None else now) - days * DAY_S


def _run(purge: Callable[[], dict[str, int]]) -> None:
    try:
        removed = purge()
    except Exception:  # a failing purge must not stop the app nor the next purge
        _log.exception("retention purge failed")
        return
    if any(removed.values()):
        _log.info("retention purge removed %s", ", ".join(
            f"{n} {what}" for what, n in removed.items() if n))


@asynccontextmanager
async def purging(purge: Callable[[], dict[str, int]], interval_s: float) -> AsyncIterator[None]:
    """Run ``purge`` (rows removed per kind) once now, then every ``interval_s`` in a worker
    thread, until the block ends (an app's lifespan)."""
    await asyncio.to_thread(_run, purge)

    async def again() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(_run, purge)
            except RuntimeError as exc:  # _run logs purge's own failures
                if "shutdown" in str(exc):  # the loop's executor is gone: no later purge runs
                    return
                raise

    task = asyncio.create_task(again())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
