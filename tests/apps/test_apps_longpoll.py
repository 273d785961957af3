"""Long polling on the round routes of an in-process server (the path members use): a held
stage-input request is answered as soon as the previous stage closes, and an ack can carry
the next stage's input."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from client_app._round_walk import MemberRound, ready_update
from sdk.rounds import ROUND_KINDS
from sdk.wire import RoundInfo

from .conftest import Member, wait_long_polls

ADMIN = {"authorization": "Bearer adm"}


def test_waiting_request_wakes_on_close_and_acks_carry_next(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, b) = server
    r = tc.post("/v1/rounds", headers=ADMIN, json={
        "kind": "router_secagg", "vector_length": 4, "min_clients": 2,
        "params": {"threshold": 2, "degree": 1}})
    assert r.status_code == 200, r.text
    info = RoundInfo.model_validate(r.json())
    stages = f"/v1/rounds/{info.round_id}/stages"
    terms = ROUND_KINDS[info.kind].terms(info)
    halves = {m.client_id: MemberRound.join(terms, client_id=m.client_id, key=m.key,
                                            update=ready_update(np.zeros(4), 1), state=None)
              for m in (a, b)}

    def send(member: Member, stage: str, wait_next_s: float) -> dict[str, Any]:
        first = member.call("GET", f"{stages}/{stage}").json()
        message = halves[member.client_id].message(stage, first["payload"] or {})
        ack = member.call("POST", f"{stages}/{stage}?wait_next_s={wait_next_s:g}",
                          {"payload": message})
        assert ack.status_code == 200, ack.text
        return dict(ack.json())

    t0 = time.monotonic()
    early = a.call("GET", f"{stages}/share_keys?wait_s=0.3")  # nothing closed: times out
    assert early.status_code == 200 and not early.json()["ready"]
    assert time.monotonic() - t0 >= 0.3  # held for wait_s, then answered not ready

    woken: list[tuple[Any, float]] = []
    waiter = threading.Thread(target=lambda: woken.append(
        (a.call("GET", f"{stages}/share_keys?wait_s=30"), time.monotonic())))
    asked_at = time.monotonic()
    waiter.start()
    wait_long_polls(tc)  # until the server holds it: the close below must wake it
    ack_a = send(a, "advertise_keys", 0.2)
    assert ack_a["next"] is not None and not ack_a["next"]["ready"]  # b has not advertised
    ack_b = send(b, "advertise_keys", 5.0)
    # b's own message closed the stage: its ack carries its share_keys input.
    assert ack_b["next"]["ready"] and ack_b["next"]["stage"] == "share_keys"
    waiter.join(timeout=60)  # a fail-safe: woken, it returns at once
    assert woken, "the held request was not woken by the stage's close"
    (resp, at), = woken
    out = resp.json()
    assert resp.status_code == 200 and out["ready"] and out["payload"] is not None
    assert at - asked_at < 30  # returned before its 30 s hold could end: woken by the close
    halves[a.client_id].message("share_keys", out["payload"])  # a real ShareKeysRequest for a
