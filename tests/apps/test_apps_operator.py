"""The operator's endpoints on an in-process server: a live roster addition enrolls without a
restart, an existing name is refused unless replaced (and a replacement revokes the old
identity), a round can be cancelled, the router's history lists every version, and the
member report shows each refusal and the DP budget spent; members are refused all of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from sdk.membership import RosterFile, add_to_roster
from sdk.wire import DPAccount, Refusal, RoundInfo, generate_key, public_key_b64
from server_app._routes._ops import member_reports
from tests.apps.conftest import Member, enrolled_team


@pytest.fixture
def team(tmp_path: Path) -> dict[str, Member]:
    return enrolled_team(tmp_path, {"m0": "member", "m1": "member", "ops": "operator"})


def _enroll(tc: TestClient, name: str, key_b64: str, token: str) -> dict[str, str]:
    resp = tc.post("/v1/enroll", json={"name": name, "token": token, "public_key": key_b64})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_live_roster_add_enrolls_without_restart(team: dict[str, Member],
                                                 tmp_path: Path) -> None:
    ops, tc = team["ops"], team["ops"].tc
    new = public_key_b64(generate_key())
    added = ops.call("POST", "/v1/roster", {"name": "st-luke", "public_key": new})
    assert added.status_code == 200, added.text
    assert _enroll(tc, "st-luke", new, added.json()["token"])["role"] == "member"
    # the roster file follows, so the server's own reload does not revoke the new name
    assert "st-luke" in {c.name for c in RosterFile.load(tmp_path / "roster.json").clients}
    assert ops.call("POST", "/v1/roster/reload").json()["revoked"] == []


def test_existing_name_refused_unless_replaced(team: dict[str, Member]) -> None:
    ops, m1 = team["ops"], team["m1"]
    new = public_key_b64(generate_key())
    refused = ops.call("POST", "/v1/roster", {"name": "m1", "public_key": new})
    assert refused.status_code == 409 and "--replace" in refused.json()["detail"]
    assert m1.call("GET", "/v1/rounds").status_code == 200  # nothing changed
    same = ops.call("POST", "/v1/roster", {"name": "m1", "replace": True,
                                           "public_key": public_key_b64(m1.key)})
    assert same.status_code == 409 and "new key" in same.json()["detail"]
    replaced = ops.call("POST", "/v1/roster", {"name": "m1", "public_key": new,
                                               "replace": True})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["replaced"] == m1.client_id
    assert m1.call("GET", "/v1/rounds").status_code == 403  # the old identity is revoked
    fresh = _enroll(m1.tc, "m1", new, replaced.json()["token"])
    assert fresh["client_id"] != m1.client_id


def test_file_rekey_revokes_the_enrolled_identity(team: dict[str, Member],
                                                  tmp_path: Path) -> None:
    ops, m0 = team["ops"], team["m0"]
    add_to_roster(tmp_path / "roster.json", name="m0", public_key=public_key_b64(generate_key()))
    assert ops.call("POST", "/v1/roster/reload").status_code == 200
    assert m0.call("GET", "/v1/rounds").status_code == 403


def test_members_are_refused_the_operator_endpoints(team: dict[str, Member]) -> None:
    m0 = team["m0"]
    for method, path, body in (("POST", "/v1/roster", {"name": "x", "public_key": "A" * 43}),
                               ("GET", "/v1/reports/members", None),
                               ("POST", "/v1/rounds/1/cancel", None)):
        resp = m0.call(method, path, body)
        assert resp.status_code == 403 and "operator" in resp.json()["detail"], (path, resp.text)


def test_cancel_and_refusals_in_the_report(team: dict[str, Member]) -> None:
    ops, m0 = team["ops"], team["m0"]
    opened = ops.call("POST", "/v1/rounds", {"kind": "rm_fedavg", "vector_length": 4,
                                             "min_clients": 2})
    assert opened.status_code == 200, opened.text
    rid = opened.json()["round_id"]
    refusal = m0.call("POST", f"/v1/rounds/{rid}/refusal",
                      {"reason": "round_kind", "detail": "rm_fedavg is not allowed"})
    assert refusal.status_code == 200, refusal.text
    cancelled = ops.call("POST", f"/v1/rounds/{rid}/cancel", {"reason": "test"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "failed" and "test" in cancelled.json()["error"]
    again = ops.call("POST", f"/v1/rounds/{rid}/cancel")
    assert again.status_code == 409 and "failed" in again.json()["detail"]
    assert ops.call("POST", "/v1/rounds/99/cancel").status_code == 404
    report = ops.call("GET", "/v1/reports/members/m0")
    assert report.status_code == 200, report.text
    assert [(r["round_id"], r["reason"]) for r in report.json()["refusals"]] == [
        (rid, "round_kind")]
    assert ops.call("GET", "/v1/reports/members/m1").json()["refusals"] == []
    assert ops.call("GET", "/v1/reports/members/nobody").status_code == 404


def test_router_history_lists_every_version(team: dict[str, Member]) -> None:
    ops = team["ops"]
    assert ops.call("GET", "/v1/router/versions").json() == []
    first = ops.send("/v1/router", b"\x00\x00\x80\x3f" * 4)  # four float32 ones
    assert first.status_code == 200, first.text
    back = ops.call("POST", "/v1/router/rollback", {"version": 1})
    assert back.status_code == 200, back.text
    history = ops.call("GET", "/v1/router/versions").json()
    assert [v["version"] for v in history] == [1, 2]
    assert history[0]["sha256"] == history[1]["sha256"]


def test_dp_budget_counts_only_rounds_the_member_contributed_to(
        team: dict[str, Member]) -> None:
    ops = team["ops"]
    members = {m["name"]: m["client_id"] for m in ops.call("GET", "/v1/members").json()}
    a, b = members["m0"], members["m1"]
    dp = DPAccount(clip_norm=1.0, noise_multiplier=1.0, sample_rate=1.0, delta=1e-5,
                   epsilon=1.0)

    def info(rid: int, dropouts: list[str], refused: list[str]) -> RoundInfo:
        return RoundInfo(round_id=rid, kind="router_secagg", status="finished", stage=None,
                         stages=[], participants=[a, b], public_keys=[], dropouts=dropouts,
                         vector_length=4, stage_deadline_s=1.0, params={}, min_clients=1,
                         base_version=None, router_version=None, error=None, created_at=0.0,
                         finished_at=1.0, dp=dp, refusals=[
                             Refusal(client_id=c, reason="dp", detail="", at=0.0)
                             for c in refused])

    from server_app._identity._identities import Identities

    state = team["ops"].tc.app.state  # type: ignore[attr-defined]
    ids = Identities(state.store, state.access, state.rounds, None, state.broker)
    reports = {r.name: r for r in member_reports(
        ids, [info(1, [], []), info(2, [b], []), info(3, [], [b])])}
    assert reports["m0"].dp_rounds == 3 and reports["m1"].dp_rounds == 1
    assert reports["m0"].epsilon_spent is not None and reports["m1"].epsilon_spent is not None
    assert reports["m0"].epsilon_spent > reports["m1"].epsilon_spent > 0
    assert [r.round_id for r in reports["m1"].refusals] == [3]
    assert json.loads(reports["m1"].model_dump_json())["delta"] == 1e-5
