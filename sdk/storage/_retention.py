"""Retention: how long either app keeps cached images, reward-query rows and audit rows, and
the background purge of what is older (once at start, then every ``interval_s``).

What a purge may never touch is each app's business (its own ``purge`` function): the rows an
open round needs, the pending reward queries, the query log inside a member's budget window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from pydantic import BaseModel, ConfigDict, Field

from sdk._periodic import periodically

__all__ = ["DAY_S", "Retention"]

DAY_S = 86_400.0
"""Seconds in a day: retention windows are given in days."""
_log = logging.getLogger("fedmor.retention")


class Retention(BaseModel):
    """How many days each kind of row is kept (the ``[retention]`` settings of both apps)."""

    model_config = ConfigDict(extra="forbid")

    images_days: float = Field(default=30.0, gt=0, description="cached query images (the "
                               "sender resends an image a member no longer holds)")
    images_bytes: int = Field(default=4 * 2**30, ge=2**20, description="cached query images "
                              "kept at most, in bytes: past it the oldest go as a new one "
                              "arrives, so a sender cannot fill the disk between two purges")
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

    def purging(self, purge: Callable[[], dict[str, int]]) -> AbstractAsyncContextManager[None]:
        """Run ``purge`` (rows removed per kind) once now, then every ``interval_s`` in a
        worker thread, until the block ends (an app's lifespan); each logs what it removed."""
        return periodically(lambda: _report(purge()), self.interval_s, "retention purge",
                            at_start=True)


def _report(removed: dict[str, int]) -> None:
    if any(removed.values()):
        _log.info("retention purge removed %s", ", ".join(
            f"{n} {what}" for what, n in removed.items() if n))
