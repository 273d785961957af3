"""Finding 6: the reward broker enforces the clip bound each member announced at enrollment;
a pull-mode answer of [1e300, -1e300] is refused (the query fails, the server stays up)."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from sdk.wire import ImageRef
from server_app._broker import BrokerError
from tests.apps.conftest import Member
from tests.security.conftest import enroll_new


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    return buf.getvalue()


def _answer_in_pull_mode(tc: TestClient, member: Member,
                         scores: list[float]) -> Exception | list[float]:
    """Query ``member`` through the server's broker while the member answers ``scores``."""
    broker = tc.app.state.broker  # type: ignore[attr-defined]
    broker.poll_s = 0.01
    out: list[Exception | list[float]] = []

    def ask() -> None:
        image = ImageRef.of(_png())
        try:
            out.append(asyncio.run(broker.query(member.client_id, [image, image], ["p", "p"],
                                                ["r0", "r1"])))
        except BrokerError as exc:
            out.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    deadline = time.monotonic() + 10
    pending: list[Any] = []
    while not pending and time.monotonic() < deadline:
        pending = member.call("GET", "/v1/reward/pending").json()
        time.sleep(0.01)
    assert pending, "the broker queued nothing"
    r = member.call("POST", f"/v1/reward/answers/{pending[0]['query_id']}", {"scores": scores})
    assert r.status_code in (204, 422), r.text  # 422: refused at the door, never stored
    thread.join(10)
    return out[0]


def test_scores_outside_the_announced_bound_are_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    resp, key = enroll_new(tc, "evil", 2.0)
    assert resp.status_code == 200, resp.text
    evil = Member(tc, key, resp.json()["client_id"])
    refused = _answer_in_pull_mode(tc, evil, [1e300, -1e300])
    assert isinstance(refused, BrokerError)
    assert "outside its announced clip bound [-2, 2]" in str(refused)
    assert _answer_in_pull_mode(tc, evil, [1.5, -2.0]) == [1.5, -2.0]  # in range: accepted
    assert tc.get("/v1/health").status_code == 200


def test_an_answer_with_the_wrong_count_is_refused(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    resp, key = enroll_new(tc, "short", 2.0)
    assert resp.status_code == 200, resp.text
    short = Member(tc, key, resp.json()["client_id"])
    refused = _answer_in_pull_mode(tc, short, [1.0])  # one score for two items
    assert isinstance(refused, BrokerError) and "instead of 2 scores" in str(refused)


def test_a_member_without_a_bound_is_not_trusted_and_bad_bounds_are_422(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, _ = server
    resp, key = enroll_new(tc, "silent", None)  # an old client: it announces no bound
    assert resp.status_code == 200, resp.text
    refused = _answer_in_pull_mode(tc, Member(tc, key, resp.json()["client_id"]), [0.1, 0.2])
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
    resp, key = enroll_new(tc, "retrained", 1.0)
    member = Member(tc, key, resp.json()["client_id"])
    assert _answer_in_pull_mode(tc, member, [0.5, -0.5]) == [0.5, -0.5]  # the row is cached
    # What another server process's POST /v1/identity/clip-bound writes: this broker's cached
    # row still says 1.
    store = tc.app.state.store  # type: ignore[attr-defined]
    assert store.set_clip_bound(member.client_id, 3.0) == 1.0
    assert _answer_in_pull_mode(tc, member, [2.5, -2.5]) == [2.5, -2.5]
    refused = _answer_in_pull_mode(tc, member, [3.5, 0.0])
    assert isinstance(refused, BrokerError) and "[-3, 3]" in str(refused)
