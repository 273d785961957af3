"""What the member's helpers (key rotation, the clip-bound announcement) use of its runner.

Defined below ``_runner``, which calls those helpers, so that they need not import it back.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._service import RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore

__all__ = ["MemberConnection", "MemberRevoked", "RunnerError", "ServerLink"]

_log = logging.getLogger("fedmor.client")


class RunnerError(RuntimeError):
    """The server refused a request for good (a 4xx other than a retryable one)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class MemberRevoked(RunnerError):
    """The server refuses this member's identity for good: the operator revoked it (403)."""


def revoked(status: int, detail: str) -> bool:
    """Whether a refusal says that the caller's identity was revoked (the server's 403 names
    it: ``identity ... was revoked by the consortium operator``)."""
    return status == 403 and "was revoked" in detail


class ServerLink:
    """Whether the server answered the last attempt: the member says so the first time it
    cannot reach the server (WARNING, within one attempt, so within one poll interval) and
    once when it can again (INFO); not at every retry in between."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_since: float | None = None

    def down(self, exc: Exception) -> None:
        """An attempt found no server (connection refused, timeout, TLS failure)."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            _log.warning("cannot reach the server at %s (server_url): %s; retrying until it "
                         "answers", self.url, exc or type(exc).__name__)

    def up(self) -> None:
        """An attempt got an answer."""
        if self.down_since is not None:
            _log.info("reached the server at %s again after %.0f s", self.url,
                      time.monotonic() - self.down_since)
            self.down_since = None


class MemberConnection(Protocol):
    """A member's signed connection to the server (``ClientRunner`` is the one in use)."""

    settings: ClientSettings
    store: ClientStore
    key: Ed25519PrivateKey
    service: RewardService | None

    def request(self, method: str, path: str, payload: Any = None, *, signed: bool = True,
                attempts: int = 30) -> httpx.Response:
        """Send one request signed with ``key``; raise ``RunnerError`` on a final refusal."""
        ...

    def enroll(self) -> str:
        """Enroll if not yet enrolled; this member's client id."""
        ...
