"""Roles: one roster, one enrollment, and each endpoint family refuses the other roles."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64
from server_app import ServerSettings, Store
from server_app._app import create_app
from tests.apps.conftest import Member, enrolled_team


@pytest.fixture
def roles(tmp_path: Path) -> dict[str, Member]:
    return enrolled_team(tmp_path, {"m0": "member", "m1": "member", "job": "aligner",
                                    "ops": "operator", "audit": "auditor"})


@pytest.mark.parametrize("who", ["job", "ops", "audit"])
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/work"),
                                              ("GET", "/v1/reward/pending"),
                                              ("GET", "/v1/rounds/1/stages/advertise"),
                                              ("POST", "/v1/reward/answers/1")])
def test_member_endpoints_refuse_other_roles(roles: dict[str, Member], who: str, method: str,
                                             path: str) -> None:
    resp = roles[who].call(method, path, {"scores": [1.0]} if method == "POST" else None)
    assert resp.status_code == 403
    detail = resp.json()["detail"]
    assert "member role" in detail and roles[who].client_id in detail


def test_members_keep_their_endpoints_and_rounds_take_members_only(
        roles: dict[str, Member]) -> None:
    assert roles["m0"].call("GET", "/v1/work").status_code == 200
    opened = roles["ops"].call("POST", "/v1/rounds", {"vector_length": 4, "min_clients": 2})
    assert opened.status_code == 200, opened.text
    assert sorted(opened.json()["participants"]) == sorted(
        [roles["m0"].client_id, roles["m1"].client_id])
    # Only the operator role (or the admin token) opens rounds.
    for who in ("m0", "job", "audit"):
        refused = roles[who].call("POST", "/v1/rounds", {"vector_length": 4})
        assert refused.status_code == 403 and "operator" in refused.json()["detail"]
    admin = roles["m0"].tc.post("/v1/rounds", json={"vector_length": 4},
                                headers={"authorization": "Bearer adm"})
    assert admin.status_code == 200
    # Any signed role (and the admin) may read the rounds.
    assert roles["job"].call("GET", "/v1/rounds").status_code == 200


def test_a_store_from_before_roles_reads_every_identity_as_a_member(tmp_path: Path) -> None:
    import sqlite3

    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute("CREATE TABLE clients (client_id TEXT PRIMARY KEY, name TEXT UNIQUE NOT "
                   "NULL, public_key TEXT NOT NULL, reward_url TEXT, enrolled_at REAL NOT NULL)")
        db.execute("INSERT INTO clients VALUES ('c-1', 'm0', 'k', NULL, 1.0)")
    store = Store(tmp_path / "old.db")
    assert [c.role for c in store.clients(None)] == ["member"]


def test_without_an_admin_token_the_operator_role_runs_the_consortium(tmp_path: Path) -> None:
    """Operators who want only signed roles leave ``admin_token`` unset (the default): the
    bearer token is refused everywhere, and an operator identity does every admin task."""
    roster = tmp_path / "roster.json"
    keys = {name: generate_key() for name in ("m0", "m1", "ops")}
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(k),
                               role="operator" if n == "ops" else "member")
              for n, k in keys.items()}
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, public_urls=["http://testserver"])
    assert cfg.admin_token is None
    tc = TestClient(create_app(cfg))
    who = {}
    for name, key in keys.items():
        resp = tc.post("/v1/enroll", json={"name": name, "token": tokens[name],
                                           "public_key": public_key_b64(key)})
        who[name] = Member(tc, key, resp.json()["client_id"])
    bearer = {"authorization": "Bearer anything"}
    for method, path in [("POST", "/v1/rounds"), ("GET", "/v1/members"),
                         ("POST", "/v1/router/rollback"), ("POST", "/v1/router")]:
        refused = tc.request(method, path, json={}, headers=bearer)
        assert refused.status_code == 403 and "disabled" in refused.json()["detail"], path

    ops = who["ops"]
    published = ops.send("/v1/router", b"\0" * 16)
    assert published.status_code == 200, published.text
    assert ops.call("POST", "/v1/router/rollback", {"version": 1}).json()["version"] == 2
    history = who["m0"].call("GET", "/v1/router/versions").json()  # any signed role reads it
    assert [(v["version"], v["round_id"], v["length"], v["size_bytes"]) for v in history] == [
        (1, None, 4, 16), (2, None, 4, 16)]
    assert history[0]["sha256"] == history[1]["sha256"]  # the rollback copied version 1
    assert ops.call("POST", "/v1/rounds", {"vector_length": 4,
                                           "min_clients": 2}).status_code == 200
    assert ops.call("GET", "/v1/members").status_code == 200
    assert ops.call("POST", "/v1/members/m1/revoke").json()["state"] == "revoked"
    # A member may not publish or roll back; each action is audited with the operator's id.
    assert who["m0"].send("/v1/router", b"\0" * 16).status_code == 403
    assert who["m0"].call("POST", "/v1/router/rollback", {"version": 1}).status_code == 403
    audit = {(r.actor, r.action) for r in tc.app.state.store.audit_log()}  # type: ignore[attr-defined]
    assert {(ops.client_id, "router_published"), (ops.client_id, "router_rolled_back"),
            (ops.client_id, "round_created"), (ops.client_id, "member_revoked")} <= audit
