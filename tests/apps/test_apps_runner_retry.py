"""The member's runner retries what may succeed later and gives up on what never will, against a
real HTTP server on 127.0.0.1 that answers a scripted sequence of statuses."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from client_app import ClientRunner, ClientSettings, ClientStore
from client_app._demo import demo_update
from client_app._transport import Unanswered
from sdk.wire import RequestRefused, generate_key
from sdk.wire._auth import HEADER_NONCE


class _Scripted(BaseHTTPRequestHandler):
    statuses: ClassVar[list[int]] = []
    nonces: ClassVar[list[str]] = []
    retry_after: ClassVar[str | None] = None  # sent with every refusal when set
    arrived: ClassVar[threading.Event]

    def do_GET(self) -> None:
        type(self).nonces.append(self.headers.get(HEADER_NONCE, ""))
        status = type(self).statuses.pop(0) if type(self).statuses else 200
        body = b'{"ok": true}' if status == 200 else b'{"detail": "scripted"}'
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        if status != 200 and self.retry_after is not None:
            self.send_header("retry-after", self.retry_after)
        self.end_headers()
        self.wfile.write(body)
        type(self).arrived.set()

    def log_message(self, *args: object) -> None:  # quiet test output
        pass


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[ClientRunner, type[_Scripted]]]:
    handler = type("Handler", (_Scripted,), {"statuses": [], "nonces": [],
                                             "arrived": threading.Event()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    settings = ClientSettings(name="m0", db_path=tmp_path / "m.db",
                              server_url=f"http://127.0.0.1:{httpd.server_port}",
                              retry_max_s=0.05,
                              scorer="client_app:HashScorer")
    store = ClientStore(settings.db_path)
    store.put("client_id", "c-m0")
    runner = ClientRunner(settings, store=store, key=generate_key(), update_fn=demo_update)
    try:
        yield runner, handler
    finally:
        runner.http.close()
        httpd.shutdown()
        httpd.server_close()


def test_retryable_statuses_are_retried_each_attempt_signed_afresh(
        scripted: tuple[ClientRunner, type[_Scripted]]) -> None:
    runner, handler = scripted
    handler.statuses = [503, 429, 500]
    resp = runner.request("GET", "/v1/anything")
    assert resp.status_code == 200 and resp.json() == {"ok": True}
    assert len(handler.nonces) == 4 and len(set(handler.nonces)) == 4  # no replayed signature


def test_a_refusal_is_final_after_one_attempt(
        scripted: tuple[ClientRunner, type[_Scripted]]) -> None:
    runner, handler = scripted
    handler.statuses = [403, 200]
    with pytest.raises(RequestRefused, match="403") as err:
        runner.request("GET", "/v1/anything")
    assert err.value.status == 403 and err.value.reason == "scripted"
    assert len(handler.nonces) == 1


def test_the_runner_gives_up_after_its_attempts(
        scripted: tuple[ClientRunner, type[_Scripted]]) -> None:
    runner, handler = scripted
    handler.statuses = [502] * 10
    with pytest.raises(RequestRefused, match="502") as err:  # the last refusal
        runner.request("GET", "/v1/anything", attempts=4)
    assert err.value.status == 502 and len(handler.nonces) == 4


def test_a_stopping_runner_does_not_sit_out_its_backoff(
        scripted: tuple[ClientRunner, type[_Scripted]]) -> None:
    runner, handler = scripted
    handler.statuses, handler.retry_after = [503] * 20, "600"  # come back in ten minutes
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            runner.request("GET", "/v1/anything")
        except Unanswered as exc:
            failed.append(exc)

    asking = threading.Thread(target=ask)
    t0 = time.monotonic()
    asking.start()
    assert handler.arrived.wait(timeout=60)  # refused once: the runner now waits 600 s
    runner.stop.set()
    asking.join(timeout=60)  # a fail-safe: cut short, it returns at once
    assert not asking.is_alive() and "runner stopping" in str(failed[0])
    assert len(handler.nonces) == 1  # nothing sent after the stop
    assert time.monotonic() - t0 < 600  # returned before the Retry-After it was waiting out
