"""Finding 4 (second review) and finding 6 (third): ``/metrics`` follows one rule for every
caller. The operator (admin token or a signed operator identity) reads the per-member series;
everyone else, anonymous or signed with another role, reads their sums, which carry no label
naming a member, so diffing them around an aligner's reward query does not name the member
that judged it (``reveal_judges = false``)."""

from __future__ import annotations

from pathlib import Path

from sdk.wire import ImageRef
from tests.apps.conftest import enrolled_team

ADMIN = {"authorization": "Bearer adm"}
ROLES = {"m0": "member", "m1": "member", "ops": "operator", "job": "aligner"}


def _series(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def test_metrics_name_a_judge_to_the_operator_only(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, ROLES, clip_bound=1.0)
    judge = team["m1"]
    with team["m0"].tc as tc:
        before = _series(tc.get("/metrics").text)
        # The broker itself queues one query for the pull-mode judge and waits for its answer.
        broker = tc.app.state.broker  # type: ignore[attr-defined]
        asked = tc.portal.start_task_soon(broker.query, judge.client_id,
                                          [ImageRef.of(b"png bytes")], ["p"], ["r"])
        pending = judge.call("GET", "/v1/work?wait_s=10&rounds=false").json()["queries"]
        assert len(pending) == 1
        views = {"anonymous": tc.get("/metrics"), "member": team["m0"].call("GET", "/metrics"),
                 "aligner": team["job"].call("GET", "/metrics")}
        for who, view in views.items():
            assert view.status_code == 200, (who, view.text)
            assert _series(view.text) ^ before, f"{who}: nothing moved, nothing to diff"
            for member in (team["m0"], judge):
                assert member.client_id not in view.text, f"{who} sees {member.client_id}"
            assert "fedmor_server_reward_queries 1.0" in view.text, who  # the total
        per_member = f'fedmor_server_reward_queries{{client_id="{judge.client_id}"}} 1.0'
        for who, view in (("admin", tc.get("/metrics", headers=ADMIN)),
                          ("operator", team["ops"].call("GET", "/metrics"))):
            assert view.status_code == 200 and per_member in view.text, who
        answered = judge.call("POST", f"/v1/reward/answers/{pending[0]['query_id']}",
                              {"scores": [0.5]})
        assert answered.status_code == 204, answered.text
        assert asked.result(timeout=30) == [0.5]


def test_a_bad_credential_on_metrics_is_refused(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, {"m0": "member"})
    tc = team["m0"].tc
    assert tc.get("/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
