"""What the member's helpers (key rotation, the clip-bound announcement) use of its runner.

Defined below ``_runner``, which calls those helpers, so that they need not import it back.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._service import RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore

__all__ = ["MemberConnection", "RunnerError"]


class RunnerError(RuntimeError):
    """The server refused a request for good (a 4xx other than a retryable one)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


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
