"""Finding 1, the connection deadlines: a client that sends its headers or its body byte by
byte is cut off, and a long poll whose caller hung up frees its slot at once. A real server
process on 127.0.0.1 with 1 s deadlines; the tests wait on the server's answers and gauges."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from fedmor_local import LocalConsortium
from tests.security._bounded import HELD_S, Caller, enroll_all, in_progress


@pytest.fixture(scope="module")
def deadlines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Caller]]]:
    """A server whose header and body deadlines are 1 s, with one enrolled member."""
    with LocalConsortium(tmp_path_factory.mktemp("deadlines"), 1, server={"connections": {
            "header_timeout_s": 1, "body_timeout_s": 1}}) as c:
        c.start_server()
        yield c.server_url, enroll_all(c)


@pytest.fixture(scope="module")
def quick_deadlines(deadlines: tuple[str, list[Caller]]) -> int:
    """The port of the server with 1 s deadlines."""
    return int(deadlines[0].rsplit(":", 1)[1])


def _trickle(sock: socket.socket, data: bytes, stop: threading.Event) -> threading.Thread:
    """Send ``data`` one byte every 50 ms from a thread, until it is sent or ``stop`` is set
    or the connection closes."""
    def run() -> None:
        for byte in data:
            if stop.wait(0.05):
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return

    sender = threading.Thread(target=run, daemon=True)
    sender.start()
    return sender


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    got = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:  # closed while a byte was on its way
            return got
        if not chunk:
            return got
        got += chunk


def test_a_slow_header_client_is_disconnected(quick_deadlines: int) -> None:
    sock = socket.create_connection(("127.0.0.1", quick_deadlines))
    sock.settimeout(30)  # a fail-safe only: the server closes after 1 s
    stop = threading.Event()
    sender = _trickle(sock, b"GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: "
                      + b"a" * 10_000, stop)
    try:
        assert _read_until_closed(sock) == b""  # closed by the server, no response
    finally:
        stop.set()
        sender.join()
        sock.close()
    # A client that sends its headers at once is served as before.
    resp = httpx.get(f"http://127.0.0.1:{quick_deadlines}/v1/health", timeout=60)
    assert resp.status_code == 200 and json.loads(resp.text)["app"] == "fedmor-server"


def test_a_slow_body_is_cut_off(quick_deadlines: int) -> None:
    """Complete headers, then a body one byte every 50 ms (1000 bytes: 50 s): after the 1 s
    body deadline the server answers 408 and closes the connection."""
    sock = socket.create_connection(("127.0.0.1", quick_deadlines))
    sock.settimeout(30)  # a fail-safe only: the server answers after 1 s
    sock.sendall(b"POST /v1/enroll HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                 b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n")
    stop = threading.Event()
    sender = _trickle(sock, b"{" + b" " * 999, stop)
    try:
        answer = _read_until_closed(sock)
    finally:
        stop.set()
        sender.join()
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connections.body_timeout_s" in answer
    assert b"connection: close" in answer.lower()


def test_a_hung_up_long_poll_frees_its_slot(deadlines: tuple[str, list[Caller]]) -> None:
    """A member opens its four long polls (its cap) and hangs up: the server ends them at
    once, so its next poll is admitted, not refused 429 until their 30 s wait ran out."""
    url, (member,) = deadlines
    port = int(url.rsplit(":", 1)[1])
    path = f"/v1/work?wait_s={HELD_S}"
    polls = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", port))
        head = "".join(f"{k}: {v}\r\n" for k, v in member.headers("GET", path).items())
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}\r\n".encode())
        polls.append(sock)
    with httpx.Client(base_url=url, timeout=60) as http:
        try:
            for _ in range(1000):  # until the server holds all four (a bounded wait)
                if in_progress(http, "long_polls") == 4:
                    break
            assert in_progress(http, "long_polls") == 4
        finally:
            for sock in polls:
                sock.close()
        fail_safe = time.monotonic() + HELD_S / 2  # the polls would end on their own at 30 s
        while in_progress(http, "long_polls") > 0:
            assert time.monotonic() < fail_safe, "hung-up long polls still held"
        poll = "/v1/work?wait_s=0.5"
        resp = http.get(poll, headers=member.headers("GET", poll))
        assert resp.status_code == 200, resp.text  # admitted: its slots are free
