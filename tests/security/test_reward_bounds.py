"""Finding 6: the reward broker enforces the clip bound each member announced at enrollment;
a pull-mode answer of [1e300, -1e300] is refused (the query fails, the server stays up)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sdk.wire import ImageRef
from server_app._rewards._broker import BrokerError
from tests._images import png
from tests.apps.conftest import Member
from tests.security.conftest import enroll_new


def _enrolled(tc: TestClient, name: str, clip_bound: float | None) -> Member:
    """``name`` enrolled on the in-process server announcing ``clip_bound``, as a member."""
    resp, key = enroll_new(tc, name, clip_bound)
    assert resp.status_code == 200, resp.text
    return Member(tc, key, resp.json()["client_id"])


def _answer_in_pull_mode(tc: TestClient, member: Member, scores: list[float],
                         status: int) -> BaseException | list[float]:
    """Query ``member`` through the server's own broker (on the app's event loop) while the
    member answers ``scores``, its answer getting ``status``: the query's result or error."""
    broker = tc.app.state.broker  # type: ignore[attr-defined]
    image = ImageRef.of(png(4))
    asked = tc.portal.start_task_soon(broker.query, member.client_id, [image, image],
                                      ["p", "p"], ["r0", "r1"])
    # The member's long poll returns as soon as the broker queued the query (its wake).
    pending = member.call("GET", "/v1/work?wait_s=10&rounds=false").json()["queries"]
    assert len(pending) == 1, "the broker queued nothing"
    r = member.call("POST", f"/v1/reward/answers/{pending[0]['query_id']}", {"scores": scores})
    assert r.status_code == status, r.text
    return asked.exception(timeout=30) or asked.result()


def test_scores_outside_the_announced_bound_are_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    evil = _enrolled(tc, "evil", 2.0)
    refused = _answer_in_pull_mode(tc, evil, [1e300, -1e300], 422)  # refused at the door
    assert isinstance(refused, BrokerError)
    assert "outside its announced clip bound [-2, 2]" in str(refused)
    assert _answer_in_pull_mode(tc, evil, [1.5, -2.0], 204) == [1.5, -2.0]  # in range
    assert tc.get("/v1/health").status_code == 200


def test_an_answer_with_the_wrong_count_is_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    short = _enrolled(tc, "short", 2.0)
    refused = _answer_in_pull_mode(tc, short, [1.0], 422)  # one score for two items: refused
    assert isinstance(refused, BrokerError) and "instead of 2 scores" in str(refused)


def test_a_member_without_a_bound_is_not_trusted_and_bad_bounds_are_422(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    silent = _enrolled(tc, "silent", None)  # an old client: it announces no bound
    refused = _answer_in_pull_mode(tc, silent, [0.1, 0.2], 422)
    assert isinstance(refused, BrokerError) and "announced no clip bound" in str(refused), refused
    for bad in (-1, 0, 1e300):
        resp, _ = enroll_new(tc, f"bad{bad}".replace(".", "").replace("+", ""), bad)
        assert resp.status_code == 422 and "clip_bound" in resp.json()["detail"]


@pytest.mark.parametrize("name", ["site-0", "site-1"])
def test_real_members_announce_their_scorer_bound(hostile: Any, name: str) -> None:
    with sqlite3.connect(hostile.server_cfg["db_path"]) as db:
        (bound,) = db.execute("SELECT clip_bound FROM clients WHERE name=?", (name,)).fetchone()
    assert bound == 1.0  # HashScorer's own bound, not a default typed twice


def test_enrollment_above_the_consortium_maximum_is_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    maximum = tc.app.state.settings.max_clip_bound  # type: ignore[attr-defined]
    resp, _ = enroll_new(tc, "greedy", maximum * 2)
    assert resp.status_code == 422
    assert f"above this consortium's maximum {maximum:g}" in resp.json()["detail"]
    assert tc.app.state.store.client_named("greedy") is None  # type: ignore[attr-defined]
    resp, _ = enroll_new(tc, "modest", maximum)  # at the maximum: accepted
    assert resp.status_code == 200, resp.text


def test_a_bound_announced_through_another_process_is_read_before_refusing(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    member = _enrolled(tc, "retrained", 1.0)
    assert _answer_in_pull_mode(tc, member, [0.5, -0.5], 204) == [0.5, -0.5]  # the row is cached
    # What another server process's POST /v1/identity/clip-bound writes: this broker's cached
    # row still says 1.
    store = tc.app.state.store  # type: ignore[attr-defined]
    assert store.set_clip_bound(member.client_id, 3.0) == 1.0
    assert _answer_in_pull_mode(tc, member, [2.5, -2.5], 204) == [2.5, -2.5]
    refused = _answer_in_pull_mode(tc, member, [3.5, 0.0], 422)
    assert isinstance(refused, BrokerError) and "[-3, 3]" in str(refused)
