"""Work discovery by long polling (``GET /v1/work``) on an in-process server: a held request
returns as soon as a round opens or a pull-mode query is queued, and empty after ``wait_s``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from sdk.wire import ImageRef, SignedClient
from sdk.wire._rounds import encode_vector
from tests.apps.conftest import Member, wait_long_polls

ADMIN = {"authorization": "Bearer adm"}


def _held(member: Member, path: str) -> tuple[threading.Thread, list[tuple[Any, float]]]:
    """Start ``GET path`` in a thread; the list gets (response, monotonic time of return)."""
    out: list[tuple[Any, float]] = []
    thread = threading.Thread(target=lambda: out.append((member.call("GET", path),
                                                          time.monotonic())))
    thread.start()
    return thread, out


def test_long_poll_wakes_on_new_round_and_times_out_empty(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, b) = server
    t0 = time.monotonic()
    idle = a.call("GET", "/v1/work?wait_s=0.5")
    assert idle.status_code == 200 and idle.json() == {"rounds": [], "queries": []}
    assert time.monotonic() - t0 >= 0.5  # held for wait_s, then empty

    asked_at = time.monotonic()
    thread, woken = _held(a, "/v1/work?wait_s=30")
    wait_long_polls(tc)  # the round below must wake a waiting request
    r = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 2, "min_clients": 2},
                headers=ADMIN)
    assert r.status_code == 200, r.text
    thread.join(timeout=60)  # a fail-safe: woken, it returns at once
    (resp, at), = woken
    assert resp.status_code == 200 and resp.json()["rounds"] == [r.json()["round_id"]]
    assert at - asked_at < 30  # returned before its 30 s hold could end: woken by the round

    # Once a client sent the current stage it has nothing to do; the other one still has.
    rid = r.json()["round_id"]
    msg = {"payload": {"weight": 1, "vector": encode_vector(np.ones(2, np.float32))}}
    assert a.call("POST", f"/v1/rounds/{rid}/stages/update", msg).status_code == 200
    assert a.call("GET", "/v1/work").json()["rounds"] == []
    assert b.call("GET", "/v1/work").json()["rounds"] == [rid]
    assert b.call("GET", "/v1/work?rounds=false").json()["rounds"] == []


def test_pull_query_is_delivered_by_the_long_poll(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (_, b) = server
    broker = tc.app.state.broker  # type: ignore[attr-defined]  # b has no reward URL: pull

    def answer_when_woken() -> None:
        resp = b.call("GET", "/v1/work?wait_s=30&rounds=false")
        for q in resp.json()["queries"]:
            b.call("POST", f"/v1/reward/answers/{q['query_id']}",
                   {"scores": [0.25] * len(q["items"])})

    thread = threading.Thread(target=answer_when_woken)
    asked_at = time.monotonic()
    thread.start()
    wait_long_polls(tc)  # the query below must wake a waiting request
    image = ImageRef.of(b"\x89PNG-not-decoded-here")
    scores = asyncio.run(broker.query(b.client_id, [image] * 2, ["p"] * 2, ["r"] * 2))
    thread.join(timeout=60)
    assert scores == [0.25, 0.25]
    assert time.monotonic() - asked_at < 30  # answered before the 30 s hold could end


def test_work_refuses_bad_wait_and_strangers(server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, _) = server
    for bad in ("31", "-1", "soon"):
        resp = a.call("GET", f"/v1/work?wait_s={bad}")
        assert resp.status_code == 422 and "wait_s" in resp.json()["detail"], resp.text
    resp = tc.get("/v1/work")
    assert resp.status_code == 401 and resp.json()["detail"]


def test_runner_falls_back_to_polling_against_a_server_without_work(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    from client_app import ClientRunner, ClientSettings, ClientStore
    from fedmor_local import OPEN_POLICY

    tc, (a, b) = server
    app = tc.app
    app.router.routes[:] = [  # type: ignore[attr-defined]  # an older server: no /v1/work
        r for r in app.router.routes if getattr(r, "path", None) != "/v1/work"]  # type: ignore[attr-defined]
    assert a.call("GET", "/v1/work").status_code == 404
    store = ClientStore(tmp_path / "a.db")
    store.put("client_id", a.client_id)
    runner = ClientRunner(ClientSettings(name="m0", db_path=tmp_path / "a.db", demo=True,
                                         policy=OPEN_POLICY),  # type: ignore[arg-type]
                          store=store, key=a.key)
    runner.http = SignedClient(http=tc)  # the real app, in process
    rid = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 2, "min_clients": 2},
                  headers=ADMIN).json()["round_id"]

    assert runner.poll_once() is False  # polled the round list instead, and ran the round
    assert runner._long_poll_works is False
    assert store.round_status(rid) == "done"
    assert b.call("GET", f"/v1/rounds/{rid}").json()["status"] == "open"  # waits for b only
    msg = {"payload": {"weight": 1, "vector": encode_vector(np.ones(2, np.float32))}}
    assert b.call("POST", f"/v1/rounds/{rid}/stages/update", msg).status_code == 200
    assert b.call("GET", f"/v1/rounds/{rid}").json()["status"] == "finished"
