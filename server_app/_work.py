"""Work discovery by long polling: ``GET /v1/work`` holds an idle client's request until a
round needs its message or a reward query is queued for it, so idle clients cost ~nothing
instead of polling the round list and the query queue every few milliseconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sdk.wire import PendingQuery, Work
from server_app._rounds import RoundManager
from server_app._store import Store

__all__ = ["Signal", "find_work"]

_T = TypeVar("_T")


class Signal:
    """A generation counter with a condition: ``wait_for`` sleeps until ``bump`` moves it.

    The check runs *outside* the condition's lock (it reads the store and may take the round
    lock, while ``bump`` is called with the round lock held), so the two locks never nest the
    wrong way round; the generation number catches a bump that lands between check and wait.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def bump(self) -> None:
        """Something changed: wake every waiter so it re-checks."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait_for(self, check: Callable[[], _T | None], timeout_s: float,
                 recheck_s: float = 1.0) -> _T | None:
        """``check()``'s first non-None result, re-checked after each bump and at least every
        ``recheck_s`` (changes made by another process over the shared store ring no bell
        here), or None once ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                seen = self._generation
            out = check()
            left = deadline - time.monotonic()
            if out is not None or left <= 0:
                return out
            with self._cond:
                if self._generation == seen:
                    self._cond.wait(min(left, recheck_s))


def find_work(rounds: RoundManager, store: Store, client_id: str, *,
              include_rounds: bool = True) -> Work | None:
    """What ``client_id`` has to do now, or None when nothing."""
    work = Work(rounds=rounds.awaiting(client_id) if include_rounds else [],
                queries=[PendingQuery.model_validate(q)
                         for q in store.pending_queries(client_id)])
    return work if work.rounds or work.queries else None
