"""Finding 7, and finding 3 of the second review: every request is authenticated from its
headers (sender, recipient, signature over the declared body hash, method, path, clock; or the
admin bearer token) before a byte of its body is read, on every route of both apps; an
unsigned body is bounded by a small limit that no header but a verified signature lifts. A
stranger announcing a large body is answered at once, without the server waiting for (or
buffering) it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from fedmor_local import LocalConsortium
from sdk.wire import generate_key, load_private_key, sign_headers
from sdk.wire._auth import authority_of
from tests.apps.conftest import Member
from tests.security.conftest import PUSH, client_id
from tests.security.test_insider_body import declared_routes

JUNK = b'{"not json'
# Well-formed auth headers whose signature is 64 bytes of nothing (no key made it).
GARBAGE = {"x-fedmor-sender": "c-nobody", "x-fedmor-timestamp": str(int(time.time())),
           "x-fedmor-nonce": "abcdefgh12345678", "x-fedmor-recipient": "server",
           "x-fedmor-authority": "testserver:80",
           "x-fedmor-content-sha256": hashlib.sha256(JUNK).hexdigest(),
           "x-fedmor-signature": base64.b64encode(bytes(64)).decode(),
           "content-type": "application/json"}
ANONYMOUS = {"/v1/health", "/v1/ready", "/metrics", "/openapi.json", "/v1/enroll"}


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, concrete path) of every API route of ``app`` (its routers' too)."""
    routes = [(method, path) for method, path, _ in declared_routes(app)]
    assert len(routes) > 3, routes
    return routes


def _apps(server: tuple[TestClient, list[Member]], tmp: Path) -> list[TestClient]:
    client = TestClient(create_client_app(ClientSettings(
        db_path=tmp / "c.db", identity_key=tmp / "c.pem", public_urls=["http://testserver"]),
        HashScorer()))
    return [server[0], client]


def test_a_garbage_signature_is_refused_on_every_route_before_the_body(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    for tc in _apps(server, tmp_path):
        for method, path in _routes(tc.app):  # type: ignore[arg-type]
            # an unknown sender: 403; a signature without the other headers: 401
            for headers, status in ((GARBAGE, 403), ({"x-fedmor-signature": "garbage"}, 401)):
                r = tc.request(method, path, content=JUNK, headers=headers)
                assert r.status_code == status, (method, path, r.status_code, r.text)


def test_anonymous_junk_is_refused_before_it_is_parsed(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    for tc in _apps(server, tmp_path):
        for method, path in _routes(tc.app):  # type: ignore[arg-type]
            if path not in ANONYMOUS:
                r = tc.request(method, path, content=JUNK,
                               headers={"content-type": "application/json"})
                assert r.status_code == 401, (method, path, r.status_code, r.text)
                assert "missing authentication header" in r.json()["detail"]


@contextlib.contextmanager
def _post_head(c: LocalConsortium, path: str, headers: dict[str, str], length: int,
               sent: bytes) -> Iterator[ssl.SSLSocket]:
    """A TLS connection to the server on which a POST announcing ``length`` body bytes was
    sent, headers and ``sent`` only; closed on exit."""
    port = int(c.server_url.rsplit(":", 1)[1])
    context = c.verify if isinstance(c.verify, ssl.SSLContext) else ssl.create_default_context()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall((f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {length}\r\n"
                     f"content-type: application/json\r\n{head}\r\n").encode() + sent)
        yield tls


def _announce(c: LocalConsortium, path: str, headers: dict[str, str], length: int) -> bytes:
    """Send only the headers of a POST announcing ``length`` body bytes (and 10 of them);
    return what the server answers within 10 s."""
    with _post_head(c, path, headers, length, b"x" * 10) as tls:
        deadline = time.monotonic() + 10
        answer = b""
        while time.monotonic() < deadline:  # the head, then the body of the answer
            answer += tls.recv(4096)
            head, sep, body = answer.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if sep and length and len(body) >= length[0]:
                return answer
        raise AssertionError(f"no complete answer within 10 s: {answer[:200]!r}")


def test_a_stranger_is_refused_before_its_body_is_read(hostile: LocalConsortium) -> None:
    path = "/v1/rounds/1/stages/update"
    body_claimed = b"y" * (1_500_000)
    forged = sign_headers(generate_key(), sender=client_id(hostile, PUSH), method="POST",
                          path=path, body=body_claimed,
                          authority=authority_of(hostile.server_url))
    answer = _announce(hostile, path, forged, len(body_claimed))
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert b"unknown sender or bad signature" in answer


def test_an_unsigned_body_has_a_small_limit(hostile: LocalConsortium) -> None:
    answer = _announce(hostile, "/v1/enroll", {}, 1_500_000)  # under max_request_bytes (2 MiB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request body exceeds 1048576 bytes" in answer


@pytest.mark.parametrize("path", ["/v1/enroll", "/v1/rewards", "/v1/rounds"])
def test_no_unverified_header_lifts_the_unsigned_limit(hostile: LocalConsortium,
                                                       path: str) -> None:
    # Four strangers at once announce 1.5 MB each (over the unsigned 1 MiB, under the signed
    # 2 MiB) with a signature header that verifies over nothing, and send 10 bytes of it: each
    # is answered before the rest is sent, so the server held none of it.
    for headers, status in ((GARBAGE | {"x-fedmor-content-sha256": "0" * 64}, b"403"),
                            ({"x-fedmor-signature": "garbage"}, b"401")):
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda h: _announce(hostile, path, h, 1_500_000),
                                    [headers] * 4))
        for answer in answers:
            assert answer.split(b" ")[1] == status, answer[:200]


def test_a_body_that_is_not_the_signed_one_is_refused(hostile: LocalConsortium) -> None:
    key = load_private_key(Path(hostile.client_cfg[PUSH]["identity_key"]))
    path = "/v1/rounds?status=open"
    headers = sign_headers(key, sender=client_id(hostile, PUSH), method="GET", path=path,
                           body=b"", authority=authority_of(hostile.server_url))
    swapped = httpx.request("GET", hostile.server_url + path, content=b"other bytes",
                            headers=headers, verify=hostile.verify, timeout=30)
    assert swapped.status_code == 403, swapped.text
    assert headers["x-fedmor-content-sha256"] == hashlib.sha256(b"").hexdigest()


def _wait_anonymous_done(c: LocalConsortium) -> None:
    """Wait until the server counts no anonymous request in progress (its own gauge)."""
    idle = 'fedmor_server_requests_in_progress{pool="anonymous"} 0.0'
    for _ in range(600):  # each read is a round trip to the server, not a sleep
        if idle in c.admin.get("/metrics").text:
            return
    raise AssertionError("an anonymous request is still in progress")


def _hang_up(c: LocalConsortium, path: str, headers: dict[str, str]) -> None:
    """Announce 60 kB, send 1 kB of it, and close the connection."""
    with _post_head(c, path, headers, 60_000, b"{" * 1000):
        pass


def test_an_aborted_upload_logs_one_line(hostile: LocalConsortium) -> None:
    log = hostile.dir / "server.log"
    start = log.stat().st_size
    # A stranger's upload to a member route (refused from its headers), then an anonymous one
    # to enrollment (read until the caller hangs up): one line in all, no traceback.
    _hang_up(hostile, "/v1/rounds/1/stages/update", GARBAGE)
    _hang_up(hostile, "/v1/enroll", {})
    deadline = time.monotonic() + 30  # a guard against a hang: the line comes when it comes
    while b"hung up" not in (new := log.read_bytes()[start:]) and b"Traceback" not in new:
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing logged: {new[-2000:]!r}")
        time.sleep(0.05)
    _wait_anonymous_done(hostile)  # a traceback is written before its request leaves the count
    new = log.read_bytes()[start:]
    assert b"Traceback" not in new, new[-3000:].decode(errors="replace")
    assert len([line for line in new.splitlines() if b"hung up" in line]) == 1, new
