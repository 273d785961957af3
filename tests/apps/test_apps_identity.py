"""The identity lifecycle on real processes: a member rotates its key while its app runs (the
old key gets 401, the next round completes), a revoked member is dropped from an open round
that still completes and is refused afterwards, a roster entry added to the running server's
file enrolls without a restart, and the operator lists every identity."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from client_app._demo import demo_params
from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._local import ADMIN_TOKEN
from sdk.membership import add_to_roster
from sdk.wire import (
    generate_key,
    key_fingerprint,
    load_private_key,
    public_key_b64,
    sign_headers,
)
from sdk.wire._auth import authority_of

from .conftest import running

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with running(tmp_path_factory.mktemp("identity"), 3, demo=True, policy=OPEN_POLICY,
                 server={"stage_deadline_s": 90.0}, identities={"ops": "operator"}) as c:
        yield c


def _signed(c: LocalConsortium, key: Ed25519PrivateKey, sender: str, method: str,
            path: str) -> httpx.Response:
    headers = sign_headers(key, sender=sender, method=method, path=path, body=b"",
                           authority=authority_of(c.server_url))
    return httpx.request(method, c.server_url + path, headers=headers, verify=c.verify,
                         timeout=10)


def _fedmor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True,
                          text=True, cwd=_REPO, timeout=120)


def _members(c: LocalConsortium) -> dict[str, dict[str, object]]:
    resp = c.admin.get("/v1/members")
    assert resp.status_code == 200, resp.text
    return {m["name"]: m for m in resp.json()}


def _senders(c: LocalConsortium, round_id: int) -> set[str]:
    """The members whose stage messages the server stored for ``round_id``."""
    import sqlite3

    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        return {str(r[0]) for r in db.execute(
            "SELECT client_id FROM stage_messages WHERE round_id=?", (round_id,))}


def _audit(c: LocalConsortium) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        return [(str(r[0]), str(r[1])) for r in db.execute("SELECT actor, action FROM audit")]


def test_a_rotated_key_works_and_the_old_one_is_refused(team: LocalConsortium) -> None:
    site = team.names[0]
    client_id = team.enrolled()[0]
    key_file = Path(team.client_cfg[site]["identity_key"])
    old = load_private_key(key_file)
    assert _signed(team, old, client_id, "GET", "/v1/work").status_code == 200

    done = _fedmor("client", "rotate-key", "--config", str(team.dir / f"{site}.json"))
    assert done.returncode == 0, done.stderr
    new = load_private_key(key_file)
    assert public_key_b64(new) != public_key_b64(old)
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert not (key_file.parent / "identity.pem.next").exists()

    refused = _signed(team, old, client_id, "GET", "/v1/work")
    assert refused.status_code == 401, refused.text  # authentication failed: a stale key
    assert "rotated out" in refused.json()["detail"]
    assert public_key_b64(new) not in refused.text
    assert _signed(team, new, client_id, "GET", "/v1/work").status_code == 200
    assert _members(team)[site]["fingerprint"] == key_fingerprint(public_key_b64(new))
    assert (client_id, "key_rotated") in _audit(team)
    # The server wrote the new key into the roster file the members check rounds against,
    # and the running app switched to the new key file: a round of all three completes.
    info = team.run_round(vector_length=8, min_clients=3, params=demo_params(samples=3),
                          timeout_s=90)
    assert info["dropouts"] == [] and len(info["participants"]) == 3


def test_a_revoked_member_is_dropped_from_an_open_round_which_completes(
        team: LocalConsortium) -> None:
    ids = dict(zip(team.names, team.enrolled(), strict=True))
    gone = team.names[2]
    joined = _members(team)[gone]["rounds"]
    team.stop(gone)  # enrolled, but silent: the round would wait for it until the deadline
    opened = team.create_round(vector_length=8, min_clients=2, params=demo_params(samples=3))
    assert ids[gone] in opened["participants"]
    deadline = time.monotonic() + 60  # the two live members send their first stage's messages
    while len(_senders(team, opened["round_id"])) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    waiting = team.round(opened["round_id"])
    assert waiting["status"] == "open" and waiting["stage"] == waiting["stages"][0]

    revoked = team.admin.post(f"/v1/members/{gone}/revoke", json={"reason": "left"})
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["state"] == "revoked"
    # Closed by the revocation: waiting for the silent member would take the 90 s deadline.
    info = team.wait_round(opened["round_id"], timeout_s=60)
    assert info["status"] == "finished", info["error"]
    assert ids[gone] in info["dropouts"]
    assert [(r["client_id"], r["reason"]) for r in info["refusals"]] == [(ids[gone], "revoked")]

    key = load_private_key(Path(team.client_cfg[gone]["identity_key"]))
    refused = _signed(team, key, ids[gone], "GET", "/v1/work")
    assert refused.status_code == 403 and "revoked" in refused.json()["detail"]
    assert gone not in {e["name"] for e in _roster(team)}
    later = team.create_round(vector_length=8, min_clients=2, params=demo_params(samples=3))
    assert ids[gone] not in later["participants"]
    assert team.wait_round(later["round_id"], timeout_s=60)["status"] == "finished"
    assert ("admin", "member_revoked") in _audit(team)
    view = _members(team)[gone]  # the operator's view: revoked, and silent in the round
    assert view["state"] == "revoked" and isinstance(view["revoked_at"], float)
    assert view["rounds"] == joined


def _roster(c: LocalConsortium) -> list[dict[str, str]]:
    import json

    return list(json.loads((c.dir / "roster.json").read_text())["clients"])


def test_roster_changes_reach_the_running_server(team: LocalConsortium) -> None:
    roster = team.dir / "roster.json"
    key = generate_key()
    token = add_to_roster(roster, name="late", public_key=public_key_b64(key))
    body = {"name": "late", "token": token, "public_key": public_key_b64(key)}
    deadline = time.monotonic() + 20
    while (resp := httpx.post(f"{team.server_url}/v1/enroll", json=body)).status_code != 200:
        assert time.monotonic() < deadline, resp.text
        time.sleep(0.2)
    late = resp.json()["client_id"]
    assert _signed(team, key, late, "GET", "/v1/work").status_code == 200
    assert _members(team)["late"]["state"] == "enrolled"

    removed = _fedmor("roster", "remove", "--roster", str(roster), "--name", "late")
    assert removed.returncode == 0, removed.stderr
    deadline = time.monotonic() + 20
    while _signed(team, key, late, "GET", "/v1/work").status_code != 403:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert _members(team)["late"]["state"] == "revoked"
    assert ("roster-file", "member_revoked") in _audit(team)


def test_the_operator_sees_every_identity(team: LocalConsortium) -> None:
    add_to_roster(team.dir / "roster.json", name="pending",
                  public_key=public_key_b64(generate_key()))
    team.admin.post("/v1/roster/reload").raise_for_status()
    view = _members(team)
    site0 = team.enrolled()[0]  # the members by name: site-0 first
    assert {n: view[n]["state"] for n in ("site-0", "site-1", "pending")} == {
        "site-0": "enrolled", "site-1": "enrolled", "pending": "not_enrolled"}
    first = view["site-0"]
    assert first["client_id"] == site0 and first["role"] == "member"
    key = load_private_key(Path(team.client_cfg["site-0"]["identity_key"]))
    assert first["fingerprint"] == key_fingerprint(public_key_b64(key))
    assert isinstance(first["last_seen"], float)
    # site-0 sent its messages in every round of this module (the earlier tests' rounds).
    joined = sum(site0 in r["participants"] for r in team.admin.get("/v1/rounds").json())
    assert first["rounds"] == joined
    assert view["pending"]["client_id"] is None and view["pending"]["last_seen"] is None

    member = _signed(team, key, site0, "GET", "/v1/members")
    assert member.status_code == 403 and "operator" in member.json()["detail"]
    assert _signed(team, key, site0, "POST",
                   "/v1/members/site-1/revoke").status_code == 403
    listed = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "roster", "list", "--server", team.server_url,
         "--insecure-http"],
        capture_output=True, text=True, cwd=_REPO, timeout=120,
        env={**os.environ, "FEDMOR_ADMIN_TOKEN": ADMIN_TOKEN})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "ROLE", "STATE"]
    row = next(line.split() for line in lines if line.startswith("site-0 "))
    assert row[:4] == ["site-0", "member", "enrolled", first["fingerprint"]]
    assert row[6] == str(joined) and row[-1] == site0  # after LAST SEEN's date and time
    assert next(line.split() for line in lines if line.startswith("ops "))[1:3] == [
        "operator", "not_enrolled"]

    # An operator identity (no admin token) signs the same listing.
    ops = team.identity_cfg["ops"]
    enrolled = httpx.post(f"{team.server_url}/v1/enroll", json={
        "name": "ops", "token": ops["enrollment_token"], "public_key": public_key_b64(
            load_private_key(Path(ops["identity_key"])))})
    assert enrolled.status_code == 200, enrolled.text
    signed = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "roster", "list", "--server", team.server_url, "--insecure-http",
         "--key-file", ops["identity_key"], "--sender", enrolled.json()["client_id"]],
        capture_output=True, text=True, cwd=_REPO, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "FEDMOR_ADMIN_TOKEN"})
    assert signed.returncode == 0, signed.stderr
    assert next(line.split() for line in signed.stdout.splitlines()
                if line.startswith("ops "))[1:3] == ["operator", "enrolled"]
