"""Group commit of stage messages: one fsync for a stage's burst, no ack before the commit."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

import server_app._rounds._manager as rounds_module
from sdk.rounds._fedavg_kind import encode_update
from sdk.wire import RoundCreate, generate_key, public_key_b64
from server_app import Store
from server_app._rounds._manager import RoundManager


def _enrolled(store: Store, n: int) -> list[str]:
    ids = []
    for i in range(n):
        key = public_key_b64(generate_key())
        store.upsert_roster(f"m{i}", key, hashlib.sha256(b"t").hexdigest())
        row, _ = store.enroll(name=f"m{i}", token="t", public_key=key, reward_url=None,
                              new_id=f"c-{i}")
        ids.append(row.client_id)
    return ids


def test_a_burst_of_messages_shares_one_commit_and_each_ack_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds_module, "_GATHER_S", 5.0)  # the burst always fits the window
    db = tmp_path / "s.db"
    store = Store(db)
    ids = _enrolled(store, 9)
    rm = RoundManager(store, default_deadline_s=600)
    round_id = rm.create(RoundCreate(kind="rm_fedavg", vector_length=4, min_clients=2)).round_id
    commits = []
    commit = store._commit
    monkeypatch.setattr(store, "_commit", lambda: (commits.append(1), commit())[1])
    seen: dict[str, bool] = {}

    def send(client_id: str) -> None:
        rm.submit(round_id, "update", client_id, encode_update(np.ones(4, np.float32), 1.0))
        with sqlite3.connect(db) as other:  # another connection sees only committed rows
            seen[client_id] = other.execute(
                "SELECT 1 FROM stage_messages WHERE client_id=?", (client_id,)).fetchone() is not None

    live = rm._rounds.live[round_id]
    burst = threading.Barrier(8)
    parse = live.parse

    def parse_together(*args: object) -> object:  # the eight arrive as one stage's burst
        burst.wait(30)
        return parse(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(live, "parse", parse_together)
    senders = [threading.Thread(target=send, args=(c,)) for c in ids[:8]]  # ids[8] stays silent
    for t in senders:
        t.start()
    for t in senders:
        t.join(30)
    assert seen == dict.fromkeys(ids[:8], True)  # every ack came after its commit
    assert len(commits) == 1  # one fsync for the whole burst
    again = Store(db)  # what a restarted server finds
    assert len(again.messages(round_id, "update")) == 8
