"""The server's periodic tasks (deadline ticker, store watcher, retention purge) end quietly
when the event loop's default executor is shut down (the loop or the interpreter is ending):
no ERROR record for a failure every later period would repeat."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fastapi import FastAPI

from server_app import ServerSettings
from server_app._app import create_app

# The tasks the lifespan starts (``sdk.serving.periodically`` names each by what it does).
PERIODIC = {"deadline tick", "reading the store's data version", "retention purge"}


class _Errors(logging.Handler):
    """ERROR records, and an event set at the first (records are emitted on the loop)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.seen.set()


async def _shut_executor_while_serving(app: FastAPI, errors: _Errors) -> set[str]:
    """Shut the loop's default executor inside the app's lifespan; wait until every periodic
    task has ended or an ERROR is logged; the names of those still running."""
    async with app.router.lifespan_context(app):
        running: set[asyncio.Task[object]] = {
            t for t in asyncio.all_tasks() if t.get_name() in PERIODIC}
        assert {t.get_name() for t in running} == PERIODIC
        await asyncio.get_running_loop().shutdown_default_executor()
        logged: asyncio.Task[object] = asyncio.create_task(errors.seen.wait())
        while running and not errors.seen.is_set():
            _, running = await asyncio.wait(running | {logged},
                                            return_when=asyncio.FIRST_COMPLETED)
            running.discard(logged)
        logged.cancel()
        return {t.get_name() for t in running}


def test_periodic_tasks_end_quietly_when_the_executor_is_shut_down(tmp_path: Path) -> None:
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         tick_interval_s=0.01, work_recheck_s=0.01,
                         retention={"interval_s": 0.01})  # type: ignore[arg-type]
    app = create_app(cfg)
    root = logging.getLogger()
    errors = _Errors()
    root.addHandler(errors)
    try:
        still = asyncio.run(_shut_executor_while_serving(app, errors))
    finally:
        root.removeHandler(errors)
        app.state.store.close()
    assert not errors.records, [r.getMessage() for r in errors.records]
    assert not still
