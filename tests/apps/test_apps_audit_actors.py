"""Every operator action is in the server's audit table with who did it (the operator
identity's client id, ``admin`` for the admin token, ``roster-file`` for a file change), and a
revoked member gets no further reward query."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64, sign_rotation
from server_app import BrokerError, ServerSettings
from server_app._app import create_app
from tests.apps.conftest import Member

_ADMIN = {"authorization": "Bearer adm"}


def test_admin_actions_are_audited_with_who_did_them(tmp_path: Path) -> None:
    roster = tmp_path / "roster.json"
    keys = {name: generate_key() for name in ("m0", "m1", "m2", "ops")}
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(k),
                               role="operator" if n == "ops" else "member")
              for n, k in keys.items()}
    app = create_app(ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                                    roster_file=roster, admin_token="adm",  # type: ignore[arg-type]
                                    public_urls=["http://testserver"]))
    tc = TestClient(app)
    who = {}
    for name, key in keys.items():
        resp = tc.post("/v1/enroll", json={"name": name, "token": tokens[name],
                                           "public_key": public_key_b64(key)})
        assert resp.status_code == 200, resp.text
        who[name] = Member(tc, key, resp.json()["client_id"])
    ops = who["ops"]

    assert ops.call("POST", "/v1/rounds", {"vector_length": 4}).status_code == 200
    assert tc.post("/v1/rounds", json={"vector_length": 4}, headers=_ADMIN).status_code == 200
    add_to_roster(roster, name="m3", public_key=public_key_b64(generate_key()))
    assert ops.call("POST", "/v1/roster/reload").json()["entries"] == 5
    broker = app.state.broker
    assert asyncio.run(broker.query(who["m2"].client_id, [], [], [])) == []  # known, row cached
    assert ops.call("POST", "/v1/members/m2/revoke", {"reason": "left"}).status_code == 200
    with pytest.raises(BrokerError, match="unknown client"):  # no data goes to it any more
        asyncio.run(broker.query(who["m2"].client_id, [], [], []))
    rotation = sign_rotation(who["m0"].client_id, who["m0"].key, generate_key())
    rotated = who["m0"].call("POST", "/v1/identity/rotate", rotation.model_dump())
    assert rotated.status_code == 200, rotated.text
    stale = who["m0"].call("GET", "/v1/work")  # still signed by the rotated-out key
    assert stale.status_code == 401 and "rotated out" in stale.json()["detail"], stale.text
    assert rotation.public_key not in stale.text  # nor is the current key named
    # The record with the old key's endorsement is published to members (only).
    records = who["m1"].call("GET", "/v1/identity/rotations")
    assert records.status_code == 200, records.text
    assert [(r["client_id"], r["old_public_key"], r["new_public_key"], r["endorsement"])
            for r in records.json()] == [(who["m0"].client_id, public_key_b64(keys["m0"]),
                                          rotation.public_key, rotation.endorsement)]
    assert ops.call("GET", "/v1/identity/rotations").status_code == 403
    assert tc.post("/v1/router", content=b"\0" * 16, headers=_ADMIN | {
        "content-type": "application/octet-stream"}).status_code == 200
    assert tc.post("/v1/router/rollback", json={"version": 1},
                   headers=_ADMIN).status_code == 200

    audit = [(r.actor, r.action) for r in app.state.store.audit_log()]
    ops_id = ops.client_id
    for entry in [("roster-file", "roster_entry_added"), (ops_id, "round_created"),
                  ("admin", "round_created"), (ops_id, "roster_entry_added"),
                  (ops_id, "member_revoked"), (who["m0"].client_id, "key_rotated"),
                  ("admin", "router_published"), ("admin", "router_rolled_back")]:
        assert entry in audit, (entry, audit)
    # The revoked member left both open rounds as a refusal, so no stage waits for it.
    for round_id in (1, 2):
        info = tc.get(f"/v1/rounds/{round_id}", headers=_ADMIN).json()
        assert [r["reason"] for r in info["refusals"]] == ["revoked"]
    # A proof by another key than the one announced is refused (422), never a 5xx; so is an
    # endorsement by another key than the caller's current one.
    other = sign_rotation(who["m1"].client_id, keys["m1"], generate_key())
    bad = who["m1"].call("POST", "/v1/identity/rotate", other.model_copy(update={
        "public_key": public_key_b64(generate_key())}).model_dump())
    assert bad.status_code == 422 and "proof" in bad.json()["detail"]
    forged = sign_rotation(who["m1"].client_id, generate_key(), generate_key())
    bad = who["m1"].call("POST", "/v1/identity/rotate", forged.model_dump())
    assert bad.status_code == 422 and "endorsement" in bad.json()["detail"]

    # A roster file moved away revokes nobody; a broken one is a 422 and changes nothing.
    roster.rename(tmp_path / "moved.json")
    missing = ops.call("POST", "/v1/roster/reload")
    assert missing.status_code == 409 and "missing" in missing.json()["detail"]
    roster.write_text("{")
    broken = ops.call("POST", "/v1/roster/reload")
    assert broken.status_code == 422 and "not a valid roster" in broken.json()["detail"]
    assert ops.call("GET", "/v1/members").status_code == 200
    assert who["m1"].call("GET", "/v1/work").status_code == 200


def test_an_auditors_query_budget_survives_a_server_restart(tmp_path: Path) -> None:
    """The per-auditor budget lives in the server's database, not in the process."""
    from sdk.serving import RateLimited
    from server_app._routes._audit import _Budget
    from server_app._settings._audit import AuditSettings
    from server_app._store import Store

    cfg = AuditSettings(query_budget=10, window_s=3600)
    _Budget(Store(tmp_path / "server.db"), cfg).charge("auditor-1", 8)
    restarted = _Budget(Store(tmp_path / "server.db"), cfg)  # a new process, same file
    with pytest.raises(RateLimited, match="used 8 of its 10"):
        restarted.charge("auditor-1", 3)
    restarted.charge("auditor-1", 2)
    restarted.charge("auditor-2", 10)  # each auditor has its own budget
    with pytest.raises(RateLimited):
        restarted.charge("auditor-2", 1)
