"""The local update is computed while SecAgg+'s key stages run: the member's driver sends its
half's advertise-keys and share-keys replies before the update exists, waits for it before the
masked input, and turns a failed update into ``RoundFailed`` (the runner then abandons the
round)."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from client_app import ClientRunner, ClientSettings, ClientStore
from client_app._demo import demo_params, demo_update
from client_app._round_walk import MemberRound, UpdateSource, ready_update
from fedmor_local import OPEN_POLICY
from sdk.rounds import ROUND_KINDS, RoundFailed
from sdk.secagg import QuantizationConfig
from sdk.wire import RoundInfo, RoundSpec, SignedClient
from server_app._rounds._manager import RoundManager

from .conftest import Member, in_process_secure_round


def _run(rounds: RoundManager, rid: int, halves: dict[str, MemberRound],
         stages: list[str]) -> None:
    for stage in stages:
        for client, half in halves.items():
            inp = rounds.broadcast(rid, stage, client)
            rounds.submit(rid, stage, client, half.message(stage, inp.payload or {}))


def test_key_stages_go_ahead_while_the_update_is_computed(tmp_path: Path) -> None:
    rounds, store, rid, halves = in_process_secure_round(tmp_path, 8, lambda _: Future())
    updates = {c: np.full(8, 0.1 * (i + 1), np.float32) for i, c in enumerate(halves)}
    stages = list(rounds.info(rid).stages)
    _run(rounds, rid, halves, stages[:2])  # advertise keys, share keys: no update needed
    pending = [h._update for h in halves.values()]  # type: ignore[attr-defined]
    assert not any(f.done() for f in pending)

    def finish() -> None:  # the local updates finish later, in another thread
        for i, (client, future) in enumerate(zip(halves, pending, strict=True)):
            future.set_result((updates[client], i + 1))

    threading.Timer(0.2, finish).start()
    _run(rounds, rid, halves, stages[2:])  # the masked input waits for them
    info = rounds.info(rid)
    assert info.status == "finished" and info.router_version is not None
    version = store.version(info.router_version)
    assert version is not None
    expected = sum((i + 1) * updates[c] for i, c in enumerate(halves)) / 6
    # One step of the round's fixed-point encoding per member (max_weight / 2**scale_bits of
    # its weighted update) over the total weight 6, plus the float32 rounding of the blob.
    q = QuantizationConfig.fitted(num_clients=len(halves))  # the round's: default clip, weights
    atol = len(halves) * q.max_weight / q.scale / 6 + np.finfo(np.float32).eps * np.abs(
        expected).max()
    np.testing.assert_allclose(np.frombuffer(version.blob, "<f4"), expected, rtol=0,
                               atol=atol)


def _fails_at_masked_input(tmp_path: Path, source: UpdateSource, match: str) -> None:
    rounds, _, rid, halves = in_process_secure_round(tmp_path, 4, lambda _: source)
    stages = list(rounds.info(rid).stages)
    _run(rounds, rid, halves, stages[:2])
    client, half = next(iter(halves.items()))
    inp = rounds.broadcast(rid, stages[2], client)
    with pytest.raises(RoundFailed, match=match):
        half.message(stages[2], inp.payload or {})


def test_a_failed_local_update_fails_the_half_at_the_masked_input(tmp_path: Path) -> None:
    failed: UpdateSource = Future()
    failed.set_exception(RoundFailed("the local update failed: no pairs"))
    _fails_at_masked_input(tmp_path, failed, "no pairs")


def test_a_wrong_length_update_is_a_round_failure(tmp_path: Path) -> None:
    _fails_at_masked_input(tmp_path, ready_update(np.zeros(5, np.float32), 1),
                           "not valid for this round.*expects 4")


def test_the_plain_round_waits_for_the_update_at_its_only_stage() -> None:
    spec = RoundSpec(round_id=1, kind="rm_fedavg", participants=["a"], public_keys=["k"],
                     vector_length=2, min_clients=1, stage_deadline_s=5.0)
    source: UpdateSource = Future()
    half = MemberRound.join(ROUND_KINDS["rm_fedavg"].terms(spec), client_id="a",
                            key=None, update=source, state=None)  # type: ignore[arg-type]
    threading.Timer(0.1, source.set_result, args=((np.ones(2, np.float32), 2.0),)).start()
    payload = half.message("update", {})
    assert isinstance(payload, bytes) and len(payload) == 8 + 2 * 4


def test_the_runner_abandons_a_round_whose_local_update_fails(
        server: tuple[TestClient, list[Member]], tmp_path: Path) -> None:
    tc, (a, _) = server
    store = ClientStore(tmp_path / "a.db")
    store.put("client_id", a.client_id)

    def no_pairs(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
        raise ValueError("no local pairs")

    runner = ClientRunner(ClientSettings(name="m0", db_path=tmp_path / "a.db",
                                         policy=OPEN_POLICY),  # type: ignore[arg-type]
                          store=store, key=a.key, update_fn=no_pairs)
    runner.http = SignedClient(http=tc)  # the real app, in process
    rid = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 2, "min_clients": 2},
                  headers={"authorization": "Bearer adm"}).json()["round_id"]
    assert runner.run_round(rid) == "abandoned"
    with sqlite3.connect(tmp_path / "a.db") as db:
        (detail,) = db.execute("SELECT detail FROM rounds WHERE round_id=?", (rid,)).fetchone()
    assert "local update failed: ValueError: no local pairs" in detail  # the member's log
    # The server learns the cause's class only: the message may quote the member's data.
    (failure,) = runner.request("GET", f"/v1/rounds/{rid}").json()["failures"]
    assert failure["reason"] == "local update failed: ValueError (details in the member's log)"


def test_the_demo_update_stands_in_for_training_time() -> None:
    def info(params: dict[str, object]) -> RoundInfo:
        return RoundInfo(round_id=1, kind="rm_fedavg", status="open", stage="update",
                         stages=["update"], participants=["a"], public_keys=["k"],
                         dropouts=[], vector_length=3, stage_deadline_s=5.0, params=params,
                         min_clients=1, base_version=None, router_version=None, error=None,
                         created_at=0.0, finished_at=None)

    t = time.perf_counter()
    update, weight = demo_update("m0", info(demo_params(train_s=0.05)), None)
    assert time.perf_counter() - t >= 0.05 and update.shape == (3,) and 1 <= weight <= 10
    np.testing.assert_array_equal(update, demo_update("m0", info({}), None)[0])
    # The demo checks its own options: the server passes them through unread.
    for bad in (-1, 61, "soon", True):
        with pytest.raises(ValueError, match=r"update\.train_s"):
            demo_update("m0", info(demo_params(train_s=bad)), None)  # type: ignore[arg-type]
    for samples in (0, 1001, 2.5):
        with pytest.raises(ValueError, match=r"update\.samples"):
            demo_update("m0", info(demo_params(samples=samples)), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="update must be an object"):
        demo_update("m0", info({"update": [1]}), None)
