"""One real consortium (a server and five client apps over HTTPS) shared by the apps tests;
``server``: an in-process server with two enrolled members.

The destructive tests (killing processes) live in ``test_apps_rounds.py``, which
tests/conftest.py orders after the other files using the shared consortium, and kill the server /
a client only at its end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient

from client_app._round_walk import MemberRound, UpdateSource
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.membership import add_to_roster
from sdk.rounds import ROUND_KINDS
from sdk.wire import RoundCreate, generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import ServerSettings, Store
from server_app._app import create_app
from server_app._capture import ServerCapture
from server_app._rounds._manager import RoundManager

N_CLIENTS = 5


@contextlib.contextmanager
def running(workdir: Path, n_clients: int, **options: Any) -> Iterator[LocalConsortium]:
    """A started ``LocalConsortium`` whose clients all enrolled, stopped on exit."""
    with LocalConsortium(workdir, n_clients, **options) as c:
        c.start()
        c.wait_enrolled()
        yield c


@pytest.fixture(scope="session")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with running(tmp_path_factory.mktemp("consortium"), N_CLIENTS, tls=True,
                 server={"stage_deadline_s": 20.0, "max_request_bytes": 2**21},
                 clients={"max_request_bytes": 2**21},
                 # the protocol tests run every kind and size of round on random updates:
                 # stand-ins and a policy that takes part in everything
                 demo=True, policy=OPEN_POLICY) as c:
        yield c


class Member:
    """One enrolled member talking to an in-process server."""

    def __init__(self, tc: TestClient, key: Ed25519PrivateKey, client_id: str) -> None:
        self.tc, self.key, self.client_id = tc, key, client_id

    def call(self, method: str, path: str, payload: object = None) -> Any:
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = sign_headers(self.key, sender=self.client_id, method=method, path=path,
                               body=body, authority=authority_of(str(self.tc.base_url))) | {"content-type": "application/json"}
        return self.tc.request(method, path, content=body, headers=headers)

    def send(self, path: str, body: bytes, *, media: str = "application/octet-stream",
             signed_body: bytes | None = None) -> Any:
        """POST raw bytes; ``signed_body`` signs other bytes than those sent (tampering)."""
        headers = sign_headers(self.key, sender=self.client_id, method="POST", path=path,
                               body=body if signed_body is None else signed_body,
                               authority=authority_of(str(self.tc.base_url)))
        return self.tc.post(path, content=body, headers=headers | {"content-type": media})


def wait_long_polls(tc: TestClient, n: int = 1, timeout_s: float = 30.0) -> None:
    """Return once the in-process server holds ``n`` long polls (its ``requests_in_progress``
    gauge, ``long_polls``): a test of a wake-up makes its change only once the request waits."""
    deadline = time.monotonic() + timeout_s
    held = -1.0
    while time.monotonic() < deadline:
        for line in tc.get("/metrics").text.splitlines():
            if line.startswith('fedmor_server_requests_in_progress{pool="long_polls"}'):
                held = float(line.rsplit(" ", 1)[1])
        if held == n:
            return
    raise AssertionError(f"the server holds {held:g} long polls, not {n}, after {timeout_s:g} s")


def enrolled_team(tmp_path: Path, role_of: dict[str, str], *,
                  base_url: str = "http://testserver", clip_bound: float | None = None,
                  **settings: Any) -> dict[str, Member]:
    """An in-process server (admin token ``adm``, ``settings`` on top) whose roster file holds
    one identity per name of ``role_of``, each enrolled with its role; every member announces
    ``clip_bound`` when it enrolls, if given."""
    roster = tmp_path / "roster.json"
    keys = {name: generate_key() for name in role_of}
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(k),
                               role=role_of[n])  # type: ignore[arg-type]
              for n, k in keys.items()}
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token="adm",  # type: ignore[arg-type]
                         **{"public_urls": [base_url], **settings})
    tc = TestClient(create_app(cfg), base_url=base_url)
    out = {}
    for name, key in keys.items():
        body: dict[str, Any] = {"name": name, "token": tokens[name],
                                "public_key": public_key_b64(key)}
        if role_of[name] == "member" and clip_bound is not None:
            body["clip_bound"] = clip_bound
        resp = tc.post("/v1/enroll", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["role"] == role_of[name]
        out[name] = Member(tc, key, resp.json()["client_id"])
    return out


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[TestClient, list[Member]]]:
    keys = [generate_key() for _ in range(2)]
    roster = tmp_path / "roster.json"
    tokens = [add_to_roster(roster, name=f"m{i}", public_key=public_key_b64(k))
              for i, k in enumerate(keys)]
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token="adm",  # type: ignore[arg-type]
                         public_urls=["http://testserver"],  # the test client's address
                         # Only a bump may wake a held /v1/work here, never the store re-read.
                         work_recheck_s=30.0)
    with TestClient(create_app(cfg)) as tc:
        members = []
        for i, (key, token) in enumerate(zip(keys, tokens, strict=True)):
            body = {"name": f"m{i}", "token": token, "public_key": public_key_b64(key),
                    "clip_bound": 1.0}
            first = tc.post("/v1/enroll", json=body)
            assert first.status_code == 200, first.text
            again = tc.post("/v1/enroll", json=body)  # an idempotent retry
            assert again.json()["client_id"] == first.json()["client_id"]
            members.append(Member(tc, key, first.json()["client_id"]))
        yield tc, members


def in_process_secure_round(tmp_path: Path, length: int, update: Callable[[str], UpdateSource],
                            *, capture: Callable[[Store], ServerCapture] | None = None,
                            ) -> tuple[RoundManager, Store, int, dict[str, MemberRound]]:
    """A ``router_secagg`` round of three enrolled members on an in-process RoundManager, and
    each member's client half, whose update comes from ``update(client_id)``; ``capture``
    builds the manager's capture mode over the store."""
    store = Store(tmp_path / "s.db")
    keys = {f"m{i}": generate_key() for i in range(3)}
    for name, key in keys.items():
        store.upsert_roster(name, public_key_b64(key),
                            hashlib.sha256(b"token-" + name.encode()).hexdigest())
        store.enroll(name=name, token="token-" + name, public_key=public_key_b64(key),
                     reward_url=None, new_id=f"c-{name}")
    rounds = RoundManager(store, default_deadline_s=60.0,
                          capture=None if capture is None else capture(store))
    info = rounds.create(RoundCreate(kind="router_secagg", vector_length=length,
                                     min_clients=2, params={"threshold": 2, "degree": 2}))
    terms = ROUND_KINDS[info.kind].terms(info)
    halves = {c: MemberRound.join(terms, client_id=c, key=keys[c[2:]], update=update(c),
                                  state=None)
              for c in info.participants}
    return rounds, store, info.round_id, halves


@contextlib.contextmanager
def push_member(workdir: Path, store: Store, server_key: Ed25519PrivateKey, name: str,
                scorer: Any, *, wrap: Callable[[Any], Any] = lambda app: app,
                port: int | None = None) -> Iterator[str]:
    """Member ``name`` (client id ``c-{name}``): a real client app scoring with ``scorer``,
    served on 127.0.0.1 (its ASGI app passed through ``wrap`` first), enrolled in ``store``
    as a push member at its URL with its scorer's bound; yields the URL, stopped on exit.
    Started again with the same ``port``, it is the same member restarted (enrolled once)."""
    from client_app import ClientSettings, ClientStore
    from client_app._app import create_client_app
    from fedmor_local import free_port
    from tests._serve import served

    db = workdir / f"{name}.db"
    ClientStore(db).put("client_id", f"c-{name}")  # as enrollment leaves it
    port = free_port() if port is None else port  # the server's queries are signed for it
    app = create_client_app(ClientSettings(db_path=db, identity_key=workdir / f"{name}.pem",
                                           server_public_key=public_key_b64(server_key),
                                           port=port), scorer)
    with served(wrap(app), port) as url:
        if store.client(f"c-{name}") is None:
            key = public_key_b64(generate_key())
            store.upsert_roster(name, key,
                                hashlib.sha256(f"token-{name}".encode()).hexdigest())
            store.enroll(name=name, token=f"token-{name}", public_key=key, reward_url=url,
                         new_id=f"c-{name}", clip_bound=scorer.clip)
        yield url

