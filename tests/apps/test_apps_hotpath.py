"""Work the request paths no longer repeat: a query's image digests, a closed stage's decoded
broadcast, a float64 copy of a float32 update; and the async HTTP client's sniffio."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import server_app._broker as broker_module
from server_app import (
    ROUND_KINDS,
    QueryItem,
    RoundManager,
    RoundSpec,
    Store,
    generate_key,
    public_key_b64,
)
from server_app._schemas import RoundCreate


def test_a_query_item_hashes_its_image_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    sha256 = hashlib.sha256

    def counting(data: bytes) -> Any:
        calls.append(data)
        return sha256(data)

    monkeypatch.setattr(broker_module.hashlib, "sha256", counting)
    item = QueryItem(image=b"png bytes", prompt="p", response="r")
    digests = {item.image_sha256 for _ in range(4)}  # cached, cache, push body, mark cached
    assert digests == {sha256(b"png bytes").hexdigest()} and len(calls) == 1
    assert item == QueryItem(image=b"png bytes", prompt="p", response="r")  # eq ignores it


def test_async_http_client_finds_sniffio() -> None:
    # httpcore imports sniffio on every async request; a missing one is a failed import (a
    # search of sys.path) each time, on the reward-query path.
    assert importlib.util.find_spec("sniffio") is not None


def _secure_round(tmp_path: Path, update: np.ndarray) -> tuple[RoundManager, Store, int,
                                                                    dict[str, Any]]:
    store = Store(tmp_path / "s.db")
    keys = {f"m{i}": generate_key() for i in range(3)}
    for name, key in keys.items():
        store.upsert_roster(name, public_key_b64(key),
                            hashlib.sha256(b"token-" + name.encode()).hexdigest())
        store.enroll(name=name, token="token-" + name, public_key=public_key_b64(key),
                     reward_url=None, new_id=f"c-{name}")
    rounds = RoundManager(store, default_deadline_s=60.0)
    info = rounds.create(RoundCreate(kind="router_secagg", vector_length=update.shape[0],
                                     min_clients=2, params={"threshold": 2, "degree": 2}))
    spec = RoundSpec(round_id=info.round_id, kind=info.kind, participants=info.participants,
                     public_keys=info.public_keys, vector_length=update.shape[0],
                     min_clients=2, stage_deadline_s=info.stage_deadline_s, params=info.params)
    halves = {c: ROUND_KINDS[info.kind].client(spec, client_id=c, key=keys[c[2:]],
                                                update=update, weight=1, state=None)
              for c in info.participants}
    return rounds, store, info.round_id, halves


def test_closed_stage_is_decoded_once_while_live_and_forgotten_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds, store, rid, halves = _secure_round(tmp_path, np.zeros(4))
    reads: list[str] = []  # stages whose closure was read from the store and found
    closure = store.closure

    def counting(round_id: int, stage: str) -> dict[str, Any] | None:
        out = closure(round_id, stage)
        if out is not None:
            reads.append(stage)
        return out

    monkeypatch.setattr(store, "closure", counting)
    stages = list(rounds.info(rid).stages)
    for stage in stages:
        for client, half in halves.items():
            inp = rounds.broadcast(rid, stage, client)
            assert inp.ready
            rounds.submit(rid, stage, client, half.message(stage, inp.payload or {}))
    # Each closed stage was read from the store once while the round was live, though every
    # submission and stage input of the next stage needed it.
    assert sorted(reads) == sorted(stages[:-1])
    assert rounds.info(rid).status == "finished"
    assert not [k for k in rounds._closures if k[0] == rid]  # nothing kept after the end
    fresh = Store(tmp_path / "s.db")  # and the store still answers for the finished round
    assert fresh.closure(rid, stages[0]) == closure(rid, stages[0])


def test_secure_client_half_keeps_a_float32_update_without_a_copy(tmp_path: Path) -> None:
    update = np.linspace(-0.5, 0.5, 8, dtype=np.float32)
    _, _, _, halves = _secure_round(tmp_path, update)
    half = next(iter(halves.values()))
    kept = half._sm._update  # type: ignore[attr-defined]
    assert kept.dtype == np.float32 and np.shares_memory(kept, update)
