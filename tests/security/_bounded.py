"""The bounded-server tests' callers: enrolled members that send raw signed requests, and the
server's in-progress gauge."""

from __future__ import annotations

from pathlib import Path

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedmor_local import LocalConsortium
from sdk.wire import load_or_create_key, sign_headers
from sdk.wire._auth import authority_of

HELD_S = 30  # the longest wait a long poll may ask for: the hostile polls stay open that long


class Caller:
    """One enrolled member sending signed requests."""

    def __init__(self, client_id: str, key: Ed25519PrivateKey, server_url: str) -> None:
        self.client_id, self.key = client_id, key
        self.authority = authority_of(server_url)  # the server it signs for

    def headers(self, method: str, path: str, body: bytes = b"") -> dict[str, str]:
        return sign_headers(self.key, sender=self.client_id, method=method, path=path,
                            body=body, authority=self.authority)

    async def get(self, http: httpx.AsyncClient, path: str) -> httpx.Response:
        return await http.get(path, headers=self.headers("GET", path))


def enroll_all(c: LocalConsortium) -> list[Caller]:
    """Enroll every member of ``c`` with its own key (no member apps: the test plays them)."""
    return [Caller(c.enroll(name), load_or_create_key(Path(c.client_cfg[name]["identity_key"])),
                   c.server_url) for name in c.names]


def in_progress(http: httpx.Client, pool: str) -> float:
    """The server's ``fedmor_server_requests_in_progress`` gauge for ``pool``."""
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'fedmor_server_requests_in_progress{{pool="{pool}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no in-progress gauge for pool {pool}")
