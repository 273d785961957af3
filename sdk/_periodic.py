"""Periodic background work of a serving app (deadline ticks, store watch, retention purge).

A private module below ``sdk.storage`` and ``sdk.serving`` so that both may use it;
``sdk.serving`` exports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

__all__ = ["periodically"]

_log = logging.getLogger("fedmor.serve")


def _logged(work: Callable[[], object], what: str) -> None:
    try:
        work()
    except Exception:  # a failing period must not stop the later ones
        _log.exception("%s failed", what)


async def _once(work: Callable[[], object], what: str) -> bool:
    """Run ``work`` once in a worker thread; False when the loop's executor is shut down."""
    try:
        await asyncio.to_thread(_logged, work, what)
    except RuntimeError:  # work's own errors stay in _logged: only submitting raised, so the
        return False      # executor is shut down (the loop is ending) and no later call can run
    return True


async def _every(work: Callable[[], object], interval_s: float, what: str) -> None:
    while True:
        await asyncio.sleep(interval_s)
        if not await _once(work, what):
            return


@asynccontextmanager
async def periodically(work: Callable[[], object], interval_s: float, what: str, *,
                       at_start: bool = False) -> AsyncIterator[None]:
    """Run the sync ``work`` in a worker thread every ``interval_s`` (and once before the block
    with ``at_start``) until the block ends, e.g. an app's lifespan. A failure is logged as
    "``what`` failed" and the next period runs; once the loop's executor is shut down the task
    ends quietly. The task is named ``what``."""
    if at_start:
        await _once(work, what)
    task = asyncio.create_task(_every(work, interval_s, what), name=what)
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
