"""What the member's helpers (key rotation, the announcements, the round walk, pull-mode
answers) use of its connection to the server.

Defined below ``_transport`` and ``_runner``, which call those helpers, so that they need not
import them back.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol, TypeVar, overload

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._service import RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk.wire import RequestRefused

__all__ = ["RETRYABLE", "MemberConnection", "MemberRevoked", "ServerLink", "Unanswered",
           "passed_on", "revoked"]

_log = logging.getLogger("fedmor.client")
T = TypeVar("T")


RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Statuses the runner sends again (after the refusal's Retry-After, else its backoff): the
server's load or trouble, not a verdict on the request."""


class Unanswered(RuntimeError):
    """No answer came: the server could not be reached on any attempt, or the runner is
    stopping (it resumes after a restart)."""


class MemberRevoked(RequestRefused):
    """The server refuses this member's identity for good: the operator revoked it (403)."""


def revoked(status: int, detail: str) -> bool:
    """Whether a refusal says that the caller's identity was revoked (the server's 403 names
    it: ``identity ... was revoked by the consortium operator``)."""
    return status == 403 and "was revoked" in detail


def passed_on(refusal: RequestRefused) -> bool:
    """Whether a caller that notes a refusal and works on must pass this one on instead: the
    identity was revoked (the runner stops), or the server refused for load or trouble (the
    next pass asks again)."""
    return isinstance(refusal, MemberRevoked) or refusal.status in RETRYABLE


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
    """A member's signed connection to the server (``ServerTransport``, under the runner, is
    the one in use)."""

    settings: ClientSettings
    store: ClientStore
    key: Ed25519PrivateKey
    service: RewardService | None

    def request(self, method: str, path: str, payload: Any = None, *, signed: bool = True,
                attempts: int = 30) -> httpx.Response:
        """Send one request signed with ``key``: its 2xx response; ``RequestRefused`` on a
        final refusal, ``Unanswered`` without an answer."""
        ...

    def get(self, path: str, model: type[T], *, attempts: int = 30) -> T:
        """``GET path`` through :meth:`request`, its answer read as ``model``."""
        ...

    @overload
    def post(self, path: str, payload: Any, model: type[T], *, signed: bool = True,
             attempts: int = 30) -> T: ...
    @overload
    def post(self, path: str, payload: Any, model: None = None, *, signed: bool = True,
             attempts: int = 30) -> None: ...
    def post(self, path: str, payload: Any, model: type[T] | None = None, *,
             signed: bool = True, attempts: int = 30) -> T | None:
        """``POST path`` through :meth:`request`, its answer read as ``model`` (without one,
        not read)."""
        ...

    def enroll(self) -> str:
        """Enroll if not yet enrolled; this member's client id."""
        ...
