"""A pull-mode answer wakes the broker's waiting query: the answer route tells the broker
(``RewardBroker.answered``), as a revocation does, so the query reads the store once more and returns, instead of
re-reading it every ``reward_poll_s``. Here that period and the reward timeout are an hour
each: a query that returns at all (within the test's one-minute bound on its wait), after at
most two reads of the store, was woken."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sdk.wire import ImageRef
from server_app import BrokerError, RewardBroker

from .conftest import Member, enrolled_team

IMAGE = ImageRef.of(b"\x89PNG an image as the aligner sent it")


async def _answer(member: Member, scores: list[float] | None = None, **answer: Any) -> Any:
    """Play the member's worker: learn of the query from a held ``GET /v1/work`` (woken when
    the broker queues it), then post ``scores`` for it (or the ``answer`` given)."""
    work = await asyncio.to_thread(member.call, "GET", "/v1/work?wait_s=30&rounds=false")
    (query,) = work.json()["queries"]
    return await asyncio.to_thread(member.call, "POST",
                                   f"/v1/reward/answers/{query['query_id']}",
                                   answer if scores is None else {"scores": scores})


def test_an_answer_wakes_the_waiting_query_without_a_poll(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, {"m0": "member"}, clip_bound=1.0, reward_poll_s=3600.0,
                         reward_timeout_s=3600.0)
    member = team["m0"]
    broker: RewardBroker = member.tc.app.state.broker  # type: ignore[attr-defined]

    async def scenario() -> None:
        asked = asyncio.create_task(broker.query(member.client_id, [IMAGE], ["p"], ["r"]))
        answered = await _answer(member, [0.25])
        assert answered.status_code == 204, answered.text
        assert await asyncio.wait_for(asked, 60) == [0.25]
        assert 1 <= broker.pull_reads <= 2  # one read before the answer, one after the wake

        # A refused answer (outside the announced bound) wakes the query just the same.
        reads = broker.pull_reads
        asked = asyncio.create_task(broker.query(member.client_id, [IMAGE], ["p2"], ["r2"]))
        refused = await _answer(member, [5.0])
        assert refused.status_code == 422, refused.text
        with pytest.raises(BrokerError, match="outside its announced clip bound"):
            await asyncio.wait_for(asked, 60)
        assert broker.pull_reads - reads <= 2

        # Revoking the member withdraws its queued query: that wakes it too.
        reads = broker.pull_reads
        asked = asyncio.create_task(broker.query(member.client_id, [IMAGE], ["p3"], ["r3"]))
        work = await asyncio.to_thread(member.call, "GET", "/v1/work?wait_s=30&rounds=false")
        assert len(work.json()["queries"]) == 1  # queued: the broker waits for it
        revoked = await asyncio.to_thread(
            member.tc.post, "/v1/members/m0/revoke", json={"reason": "left"},
            headers={"authorization": "Bearer adm"})
        assert revoked.status_code == 200, revoked.text
        with pytest.raises(BrokerError, match="revoked"):
            await asyncio.wait_for(asked, 60)
        assert broker.pull_reads - reads <= 2

    asyncio.run(scenario())
    # The operator sees the same count on /metrics (no member label: public as it is).
    metrics = member.tc.get("/metrics").text
    assert f'fedmor_server_broker_waits{{event="pull_reads"}} {float(broker.pull_reads)}' \
        in metrics, [line for line in metrics.splitlines() if "broker" in line]


def test_a_pull_members_refusal_for_load_is_queued_again_after_its_retry_after(
        tmp_path: Path) -> None:
    """As a push member's 429 is sent again: the answer ``retry_after_s`` 1 (refused for load,
    not for the query) puts the same query back in the member's queue a second later, and its
    next answer is the query's."""
    team = enrolled_team(tmp_path, {"m0": "member"}, clip_bound=1.0, reward_timeout_s=60.0)
    member = team["m0"]
    broker: RewardBroker = member.tc.app.state.broker  # type: ignore[attr-defined]

    async def scenario() -> None:
        asked = asyncio.create_task(broker.query(member.client_id, [IMAGE], ["p"], ["r"]))
        busy = await _answer(member, error="busy", retry_after_s=1)
        assert busy.status_code == 204, busy.text
        answered = await _answer(member, [0.5])  # the same items, queued again
        assert answered.status_code == 204, answered.text
        assert await asyncio.wait_for(asked, 60) == [0.5]

    asyncio.run(scenario())
    assert broker.resends == 1


def test_refusals_for_load_keep_one_stored_copy_of_the_query(tmp_path: Path) -> None:
    """A hostile pull member answers ``retry_after_s`` 0 again and again: each answer is one
    small request, and the server sends the query again each time (after its floor of a tenth
    of a second). The query is queued again as the same row, so the server keeps one copy of
    its items (the image's bytes included) however often the member refuses, not one per
    refusal for ``reward_queries_days``."""
    team = enrolled_team(tmp_path, {"m0": "member"}, clip_bound=1.0, reward_timeout_s=60.0)
    member = team["m0"]
    broker: RewardBroker = member.tc.app.state.broker  # type: ignore[attr-defined]
    image = ImageRef.of(b"\x89PNG " + bytes(range(256)) * 256)  # 64 KiB, not yet cached

    async def scenario() -> None:
        asked = asyncio.create_task(broker.query(member.client_id, [image], ["p"], ["r"]))
        for _ in range(12):
            busy = await _answer(member, error="busy", retry_after_s=0)
            assert busy.status_code == 204, busy.text
        answered = await _answer(member, [0.5])
        assert answered.status_code == 204, answered.text
        assert await asyncio.wait_for(asked, 60) == [0.5]

    asyncio.run(scenario())
    assert broker.resends == 12
    store = member.tc.app.state.store  # type: ignore[attr-defined]
    ((rows, stored),) = store.read("SELECT COUNT(*), SUM(length(items)) FROM reward_queries")
    assert rows == 1 and stored < 2 * len(image.b64()), (rows, stored)


def test_pending_queries_come_a_page_at_a_time_the_oldest_always(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member's fetch lists its queued queries until a page of bytes was listed, so an
    answer holds at most a page and one query whatever the queue's depth; the rest follow."""
    from sdk.wire import PendingQuery, RewardAnswer, RewardItem
    from server_app import Store

    team = enrolled_team(tmp_path, {"m0": "member"})
    member = team["m0"]
    store: Store = member.tc.app.state.store  # type: ignore[attr-defined]
    item = RewardItem(image_sha256="0" * 64, prompt="p", response="r" * 1000)
    queued = [store.queue_query(member.client_id, [item]) for _ in range(3)]
    ids, size = [q.query_id for q in queued], queued[0].size

    def page(page_bytes: int | None) -> list[int]:
        return [q.query_id for q in store.pending_queries(member.client_id, page_bytes)]

    assert page(None) == ids and page(3 * size) == ids
    assert page(2 * size) == ids[:2] and page(1) == ids[:1]  # the oldest, even over a page
    # Both of the member's fetches list one page (PAGE_BYTES made two queries' worth here).
    monkeypatch.setattr(PendingQuery, "PAGE_BYTES", 2 * size)
    work = member.call("GET", "/v1/work?rounds=false").json()
    pending = member.call("GET", "/v1/reward/pending").json()
    assert [q["query_id"] for q in work["queries"]] == [q["query_id"] for q in pending] == ids[:2]
    store.answer_query(ids[0], RewardAnswer(scores=[0.0]))
    assert [q["query_id"] for q in member.call("GET", "/v1/reward/pending").json()] == ids[1:]
