"""Work discovery by long polling: ``GET /v1/work`` holds an idle client's request until a
round needs its message or a reward query is queued for it, so idle clients cost ~nothing
instead of polling the round list and the query queue every few milliseconds.

A held request waits on the event loop (a future, no thread): the server's thread pool is for
work, and a member holding many long polls must not take the threads every other caller needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sdk.wire import PendingQuery, StageBroadcast, Work
from server_app._rounds._manager import RoundManager
from server_app._store import Store

__all__ = ["Signal", "find_work", "held", "store_watch", "wait_broadcast", "wake"]

_T = TypeVar("_T")
_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def wake(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve ``future``, which waits on ``loop``, from any thread (a worker thread's store
    write wakes the event loop's waiter); a closed loop has nobody waiting."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_resolve, future)


class Signal:
    """Generation counters that async waiters sleep on until ``bump`` moves them.

    ``bump()`` (a round opened or moved on) wakes every waiter; ``bump(key)`` (a query was
    queued for member ``key``) wakes only the waiters of that key, so one member's queries do
    not make every idle member re-read the store. ``bump`` may be called from any thread (the
    round manager calls it from worker threads with its lock held): it only schedules wake-ups
    on the waiters' loops, never runs their checks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all = 0
        self._keyed: dict[str, int] = {}
        self._waiters: dict[str | None, set[_Waiter]] = {}

    def token(self, key: str | None = None) -> tuple[int, int]:
        """What a waiter on ``key`` has seen: read it *before* checking for work, then pass it
        to :meth:`wait`, so a bump between the check and the wait is not lost."""
        with self._lock:
            return self._all, 0 if key is None else self._keyed.get(key, 0)

    def bump(self, key: str | None = None) -> None:
        """Something changed (for ``key`` only, or for everyone): wake those waiters."""
        with self._lock:
            if key is None:
                self._all += 1
                woken = [w for waiters in self._waiters.values() for w in waiters]
                self._waiters.clear()
            else:
                self._keyed[key] = self._keyed.get(key, 0) + 1
                woken = list(self._waiters.pop(key, ()))
        for loop, future in woken:
            wake(loop, future)

    async def wait(self, seen: tuple[int, int], timeout_s: float,
                   key: str | None = None) -> None:
        """Return once ``key``'s token moved past ``seen`` or ``timeout_s`` passed."""
        loop = asyncio.get_running_loop()
        waiter: _Waiter = (loop, loop.create_future())
        with self._lock:
            if (self._all, 0 if key is None else self._keyed.get(key, 0)) != seen:
                return
            self._waiters.setdefault(key, set()).add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter[1], timeout_s)
        finally:
            with self._lock:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

    async def wait_for(self, check: Callable[[], _T], done: Callable[[_T], bool],
                       timeout_s: float, *, key: str | None = None,
                       first: tuple[tuple[int, int], _T] | None = None) -> _T:
        """``check()`` (run in a worker thread: it reads the store) until ``done`` says its
        result is final or ``timeout_s`` passed; re-checked after each bump of ``key``.
        ``first``: a token and the result of a check the caller already made after it."""
        deadline = time.monotonic() + timeout_s
        if first is None:
            seen = self.token(key)
            out = await run_in_threadpool(check)
        else:
            seen, out = first
        while not done(out) and (left := deadline - time.monotonic()) > 0:
            await self.wait(seen, left, key)
            seen = self.token(key)
            out = await run_in_threadpool(check)
        return out


async def _hung_up(request: Request) -> None:
    """Return once ``request``'s client has disconnected (its body is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def held(request: Request, waiting: Awaitable[_T], gone: _T) -> _T:
    """``waiting``'s result, or ``gone`` as soon as ``request``'s client hangs up: a held
    request then ends at once and frees its long-poll slot, instead of holding it for a
    client that is no longer there until its wait runs out."""
    wait = asyncio.ensure_future(waiting)
    hangup = asyncio.ensure_future(_hung_up(request))
    try:
        await asyncio.wait({wait, hangup}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait, hangup):
            task.cancel()
        await asyncio.gather(wait, hangup, return_exceptions=True)
    return wait.result() if wait.done() and not wait.cancelled() else gone


def store_watch(store: Store, signal: Signal) -> Callable[[], None]:
    """A check that bumps ``signal`` when another connection committed to ``store`` since the
    last check (a broker in another process queued a query): run every few moments, one cheap
    read for the whole server, not one store read per held request."""
    seen: list[int] = []  # the data version the last check read

    def check() -> None:
        now = store.data_version()
        if seen and seen[0] != now:
            signal.bump()
        seen[:] = [now]

    return check


def find_work(rounds: RoundManager, store: Store, client_id: str, *,
              include_rounds: bool = True) -> Work | None:
    """What ``client_id`` has to do now, or None when nothing."""
    work = Work(rounds=rounds.awaiting(client_id) if include_rounds else [],
                queries=store.pending_queries(client_id, PendingQuery.PAGE_BYTES))
    return work if work.rounds or work.queries else None


def _final(out: StageBroadcast) -> bool:
    return out.ready or out.round_status != "open"


async def wait_broadcast(request: Request, rounds: RoundManager, signal: Signal,
                         round_id: int, stage: str, client_id: str, wait_s: float,
                         first: tuple[tuple[int, int], StageBroadcast]) -> StageBroadcast:
    """``client_id``'s input for ``stage``, waited for up to ``wait_s`` on the event loop
    (``first``: the token taken before, and the result of, the caller's own first look)
    while ``request``'s client is still there."""
    return await held(request, signal.wait_for(
        lambda: rounds.broadcast(round_id, stage, client_id), _final, wait_s, first=first),
        first[1])
