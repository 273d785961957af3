"""A hostile-peer consortium of real processes: one server and three member apps over HTTPS,
``site-0`` and ``site-2`` in push mode, ``site-1`` in pull mode; plus helpers that play the
attacker (a signed raw request, a broker query, a database read)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._local import wait_healthy
from sdk.wire import (
    SERVER_SENDER,
    ImageRef,
    generate_key,
    load_private_key,
    public_key_b64,
    sign_headers,
)
from sdk.wire._auth import authority_of
from server_app import RewardBroker, Store
from tests.apps.conftest import server  # noqa: F401  (an in-process server, two members)

PUSH, PULL, PUSH2 = "site-0", "site-1", "site-2"


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with LocalConsortium(tmp_path_factory.mktemp("hostile"), 3, tls=True,
                         server={"stage_deadline_s": 20.0, "max_request_bytes": 2**21},
                         clients={"max_request_bytes": 2**21},
                         # hostile peers in rounds of every kind, on random updates
                         demo=True, policy=OPEN_POLICY) as c:
        c.start_server()
        for name in c.names:
            c.start_client(name, wait=False, **({"public_url": None} if name == PULL else {}))
        for name in c.names:
            wait_healthy(f"https://127.0.0.1:{c.client_cfg[name]['port']}", verify=c.verify,
                         proc=c.procs[name])
        c.wait_enrolled()
        yield c


def client_id(c: LocalConsortium, name: str) -> str:
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        return str(db.execute("SELECT client_id FROM clients WHERE name=?", (name,))
                   .fetchone()[0])


def client_db(c: LocalConsortium, name: str, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
        return db.execute(sql, args).fetchall()


def broker(c: LocalConsortium, mode: str = "auto", timeout_s: float = 30) -> RewardBroker:
    """The server's broker, in this process, on the running server's own store and key."""
    return RewardBroker(Store(c.server_cfg["db_path"]), load_private_key(
        Path(c.server_cfg["identity_key"])), verify=c.verify, mode=mode, timeout_s=timeout_s,
        allow_private=True)  # members on 127.0.0.1


def query(b: RewardBroker, cid: str, items: list[tuple[bytes, str, str]]) -> list[float]:
    """Ask member ``cid`` to score (image bytes, prompt, response) triples."""
    async def go() -> list[float]:
        try:
            return await b.query(cid, [ImageRef.of(d) for d, _, _ in items],
                                 [p for _, p, _ in items], [r for _, _, r in items])
        finally:
            await b.aclose()
    return asyncio.run(go())


def server_signed_post(c: LocalConsortium, url: str, path: str, payload: object,
                       **sign: Any) -> httpx.Response:
    """POST ``payload`` to a member app, signed with the server's own identity key
    (``sign``: ``recipient``, the member's client id, and any other ``sign_headers`` option)."""
    body = json.dumps(payload).encode()
    key = load_private_key(Path(c.server_cfg["identity_key"]))
    headers = sign_headers(key, sender=SERVER_SENDER, method="POST", path=path, body=body,
                           **{"authority": authority_of(url), **sign})
    return httpx.post(url + path, content=body, verify=c.verify, timeout=30,
                      headers=headers | {"content-type": "application/json"})


def enroll_new(tc: TestClient, name: str, clip_bound: Any = 1.0,
               **fields: Any) -> tuple[httpx.Response, Ed25519PrivateKey]:
    """Put ``name`` on the in-process server's roster and enroll it (extra ``fields`` go into
    the enrollment request); returns the answer and the member's key."""
    key = generate_key()
    tc.app.state.store.upsert_roster(  # type: ignore[attr-defined]
        name, public_key_b64(key), hashlib.sha256(f"token-{name}".encode()).hexdigest())
    body = {"name": name, "token": f"token-{name}", "public_key": public_key_b64(key),
            "clip_bound": clip_bound, **fields}
    return tc.post("/v1/enroll", json=body), key
