"""An enrolled insider's large bodies: correctly signed maximum-size POSTs to routes the
signer's role may not call, sent at once over raw connections while the server's resident
memory is read from ``/proc`` (the load benchmark and the security tests share it)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sdk.wire import SignedAuth

__all__ = ["InsiderPost", "insider_bodies", "rss_mb"]


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` now, in MiB (``VmRSS`` of ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass(frozen=True)
class InsiderPost:
    """One signer and the route it posts to (one its role may not call)."""

    key: Ed25519PrivateKey
    sender: str
    path: str


def _post(url: str, verify: Any, post: InsiderPost, body: bytes) -> int:
    """POST ``body`` signed by ``post``'s signer, sending it while reading the answer; the
    answer's status (the body may be cut short by the server's answer and close)."""
    parts = urlsplit(url)
    # The signed client's own signature (one signing path), sent over a raw socket so the
    # body can stream while the server's early answer is read.
    request = httpx.Request("POST", url.rstrip("/") + post.path, content=body)
    next(SignedAuth(post.key, post.sender).auth_flow(request))
    headers = {k: v for k, v in request.headers.items() if k.startswith("x-fedmor-")}
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = socket.create_connection((parts.hostname, parts.port), timeout=120)
    conn: socket.socket = raw
    if parts.scheme == "https":
        context = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
        conn = context.wrap_socket(raw, server_hostname=parts.hostname)
    with conn:
        conn.sendall((f"POST {post.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
                      f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
                      f"{head}\r\n").encode())

        def send_body() -> None:
            view = memoryview(body)
            try:
                for start in range(0, len(view), 2**20):
                    conn.sendall(view[start:start + 2**20])
            except OSError:  # the server answered and closed: the rest is not wanted
                pass

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        with_status = answer.split(b" ", 2)
        if len(with_status) < 2:
            raise RuntimeError(f"no answer to {post.path}: {answer[:200]!r}")
        with contextlib.suppress(OSError):  # the server may have closed it first
            conn.shutdown(socket.SHUT_RDWR)
        sender.join(timeout=120)
        return int(with_status[1])


def insider_bodies(url: str, verify: Any, posts: list[InsiderPost], size: int
                   ) -> list[int]:
    """Send every post of ``posts`` at once, each a correctly signed ``size``-byte body; the
    status each got, in order."""
    body = b"x" * size  # one buffer: the senders share it
    with ThreadPoolExecutor(len(posts)) as pool:
        return list(pool.map(lambda p: _post(url, verify, p, body), posts))
