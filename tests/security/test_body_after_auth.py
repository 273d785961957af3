"""Finding 7: a signed request's headers (sender, recipient, signature over the declared body
hash, clock) are checked before its body is read; an unsigned body is bounded by a small limit.
A stranger announcing a large body is answered at once, without the server waiting for (or
buffering) it."""

from __future__ import annotations

import hashlib
import socket
import ssl
import time
from pathlib import Path

import httpx

from fedmor_local import LocalConsortium
from server_app import generate_key, load_private_key, sign_headers
from tests.security.conftest import PUSH, client_id


def _announce(c: LocalConsortium, path: str, headers: dict[str, str], length: int) -> bytes:
    """Send only the headers of a POST announcing ``length`` body bytes (and 10 of them);
    return what the server answers within 10 s."""
    port = int(c.server_url.rsplit(":", 1)[1])
    context = c.verify if isinstance(c.verify, ssl.SSLContext) else ssl.create_default_context()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall((f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {length}\r\n"
                     f"content-type: application/octet-stream\r\n{head}\r\n").encode()
                    + b"x" * 10)
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
                          path=path, body=body_claimed)
    answer = _announce(hostile, path, forged, len(body_claimed))
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert b"unknown sender or bad signature" in answer


def test_an_unsigned_body_has_a_small_limit(hostile: LocalConsortium) -> None:
    answer = _announce(hostile, "/v1/enroll", {}, 1_500_000)  # under max_request_bytes (2 MiB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request body exceeds 1048576 bytes" in answer


def test_a_body_that_is_not_the_signed_one_is_refused(hostile: LocalConsortium) -> None:
    key = load_private_key(Path(hostile.client_cfg[PUSH]["identity_key"]))
    path = "/v1/rounds?status=open"
    headers = sign_headers(key, sender=client_id(hostile, PUSH), method="GET", path=path,
                           body=b"")
    swapped = httpx.request("GET", hostile.server_url + path, content=b"other bytes",
                            headers=headers, verify=hostile.verify, timeout=30)
    assert swapped.status_code == 403, swapped.text
    assert headers["x-fedmor-content-sha256"] == hashlib.sha256(b"").hexdigest()
