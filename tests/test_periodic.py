"""``sdk.serving.periodically``: an app's background work runs in a worker thread each period,
a failing period is logged and the next one runs, and once the loop's executor is shut down the
task ends without an error (on a real event loop and its real thread pool)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from sdk.serving import periodically

WAIT_S = 60.0  # a bound for a hung test only: every wait below ends on an event


class _Errors(logging.Handler):
    """The ERROR records of the ``fedmor`` loggers; ``notify`` is called at each."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.notify: Callable[[], object] = lambda: None

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.notify()


@pytest.fixture
def errors() -> Iterator[_Errors]:
    handler = _Errors()
    log = logging.getLogger("fedmor")
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)


class _Work:
    """A sync callable that counts its calls, records their threads and fails on the first
    ``failing`` of them; ``reached(n)`` is an event set once it has been called ``n`` times."""

    def __init__(self, failing: int = 0) -> None:
        self.calls = 0
        self.failing = failing
        self.threads: set[int] = set()
        self._events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def reached(self, n: int) -> threading.Event:
        with self._lock:
            return self._events.setdefault(n, threading.Event())

    def __call__(self) -> None:
        with self._lock:
            self.calls += 1
            self.threads.add(threading.get_ident())
            self._events.setdefault(self.calls, threading.Event()).set()
            if self.calls <= self.failing:
                raise ValueError(f"period {self.calls} fails")


async def _until(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT_S), "the awaited period never ran"


def test_a_failing_period_is_logged_and_the_next_one_runs(errors: _Errors) -> None:
    work = _Work(failing=1)

    async def main() -> None:
        async with periodically(work, 0.001, "the test's work"):
            await _until(work.reached(2))

    asyncio.run(main())
    assert [r.getMessage() for r in errors.records] == ["the test's work failed"]
    assert errors.records[0].exc_info is not None
    assert str(errors.records[0].exc_info[1]) == "period 1 fails"
    assert threading.get_ident() not in work.threads  # in a worker thread, not on the loop


def test_at_start_runs_once_before_the_block_and_not_without_it() -> None:
    started, lazy = _Work(), _Work()

    async def main() -> tuple[int, int]:
        async with periodically(started, 3600, "started", at_start=True), \
                periodically(lazy, 3600, "lazy"):
            return started.calls, lazy.calls

    assert asyncio.run(main()) == (1, 0)


def test_it_ends_quietly_once_the_loop_executor_is_shut_down(errors: _Errors) -> None:
    work = _Work()

    async def main() -> asyncio.Task[object]:
        loop = asyncio.get_running_loop()
        logged = asyncio.Event()
        errors.notify = lambda: loop.call_soon_threadsafe(logged.set)
        async with periodically(work, 0.001, "the test's work"):
            await _until(work.reached(1))
            task = next(t for t in asyncio.all_tasks() if t.get_name() == "the test's work")
            await loop.shutdown_default_executor()
            error = asyncio.create_task(logged.wait())
            await asyncio.wait({task, error}, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            error.cancel()
            assert task.done(), "the task still runs with no executor left"
            return task

    task = asyncio.run(main())
    assert not errors.records, [r.getMessage() for r in errors.records]
    assert not task.cancelled() and task.exception() is None  # it ended on its own
