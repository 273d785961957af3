"""Finding 4 (second review): the unauthenticated ``/metrics`` carries no series labelled by
member, so diffing it around an aligner's reward query does not name the member that judged
it (``reveal_judges = false``); the operator (admin token or a signed operator identity)
still reads the per-member series."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.apps.conftest import Member

ADMIN = {"authorization": "Bearer adm"}


def _series(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def test_public_metrics_do_not_name_the_judge(server: tuple[TestClient, list[Member]]) -> None:
    tc, members = server
    store = tc.app.state.store  # type: ignore[attr-defined]
    before = _series(tc.get("/metrics").text)
    # What the broker does with an aligner's query to a pull-mode judge: one queued row.
    store.queue_query(members[1].client_id, [{"sha256": "0" * 64, "prompt": "p"}])
    public = tc.get("/metrics")
    assert public.status_code == 200
    changed = _series(public.text) ^ before
    assert changed, "the public series moved not at all: nothing to diff"
    for member in members:
        assert member.client_id not in public.text, f"{member.client_id} named in /metrics"
    assert "fedmor_server_reward_queries 1.0" in public.text  # the total stays public
    operator = tc.get("/metrics", headers=ADMIN)
    assert operator.status_code == 200
    assert (f'fedmor_server_reward_queries{{client_id="{members[1].client_id}"}} 1.0'
            in operator.text)


def test_a_member_does_not_read_the_operator_metrics(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, _) = server
    assert a.call("GET", "/metrics").status_code == 403
    assert tc.get("/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
