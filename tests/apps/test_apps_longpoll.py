"""Long polling in the round manager (no HTTP): a waiting stage-input request is answered as
soon as the previous stage closes, and an ack can carry the next stage's input."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import numpy as np

from client_app._member_round import MemberRound, ready_update
from sdk.rounds import ROUND_KINDS
from sdk.wire import RoundCreate, StageBroadcast, generate_key, public_key_b64
from server_app import Store
from server_app._rounds._manager import RoundManager


def test_waiting_request_wakes_on_close_and_acks_carry_next(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    keys = {f"m{i}": generate_key() for i in range(2)}
    for name, key in keys.items():
        store.upsert_roster(name, public_key_b64(key), hashlib.sha256(b"token-" + name.encode())
                            .hexdigest())
        store.enroll(name=name, token="token-" + name, public_key=public_key_b64(key),
                     reward_url=None, new_id=f"c-{name}")
    rounds = RoundManager(store, default_deadline_s=60.0)
    info = rounds.create(RoundCreate(kind="router_secagg", vector_length=4, min_clients=2,
                                     params={"threshold": 2, "degree": 1}))
    rid, (a, b) = info.round_id, info.participants
    terms = ROUND_KINDS[info.kind].terms(info)
    halves = {c: MemberRound.join(terms, client_id=c, key=keys[c[2:]],
                                  update=ready_update(np.zeros(4), 1), state=None)
              for c in (a, b)}

    t0 = time.monotonic()
    early = rounds.broadcast(rid, "share_keys", a, wait_s=0.3)  # nothing closed: times out
    assert not early.ready and 0.3 <= time.monotonic() - t0 < 10

    woken: list[tuple[StageBroadcast, float]] = []
    waiter = threading.Thread(target=lambda: woken.append(
        (rounds.broadcast(rid, "share_keys", a, wait_s=30.0), time.monotonic())))
    waiter.start()
    first = rounds.broadcast(rid, "advertise_keys", a)
    ack_a = rounds.submit(rid, "advertise_keys", a,
                          halves[a].message("advertise_keys", first.payload or {}),
                          wait_next_s=0.2)
    assert ack_a.next is not None and not ack_a.next.ready  # b has not advertised yet
    first = rounds.broadcast(rid, "advertise_keys", b)
    closed_at = time.monotonic()
    ack_b = rounds.submit(rid, "advertise_keys", b,
                          halves[b].message("advertise_keys", first.payload or {}),
                          wait_next_s=5.0)
    # b's own message closed the stage: its ack carries its share_keys input.
    assert ack_b.next is not None and ack_b.next.ready and ack_b.next.stage == "share_keys"
    waiter.join(timeout=20)
    (out, at), = woken
    assert out.ready and out.payload is not None and at - closed_at < 10  # not the 30 s timeout
    halves[a].message("share_keys", out.payload)  # a real ShareKeysRequest for a
