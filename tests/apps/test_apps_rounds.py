"""Secure router rounds across real processes: one server, five client apps, over HTTPS."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

import httpx
import numpy as np
import pytest

from client_app._demo import demo_update
from fedmor_local import LocalConsortium
from sdk.secagg import (
    QuantizationConfig,
    RoundParams,
    SecAggClient,
    SecAggServer,
    generate_identities,
)
from sdk.wire import RoundInfo

N = 5  # conftest.N_CLIENTS
LENGTH = 64


def _router(c: LocalConsortium, version: int) -> np.ndarray:
    resp = c.admin.get(f"/v1/router/{version}")
    assert resp.status_code == 200
    return np.frombuffer(resp.content, dtype="<f4")


def _expected(c: LocalConsortium, info: dict[str, object], names: list[str]) -> np.ndarray:
    round_info = RoundInfo.model_validate(info)
    ups = [demo_update(n, round_info, None) for n in names]
    total = sum(w * u.astype(np.float64) for u, w in ups)
    return np.asarray(total / sum(w for _, w in ups), dtype=np.float32)


def _in_process(info: dict[str, object], names: list[str]) -> np.ndarray:
    """The same inputs through sdk.secagg in memory (no REST)."""
    round_info = RoundInfo.model_validate(info)
    ids = list(range(1, len(names) + 1))
    keys, roster = generate_identities(ids)
    server_params = RoundParams(round_id="mem", participants=ids, threshold=3, degree=4,
                                vector_length=LENGTH, graph_seed=b"s" * 32,
                                quantization=_quant(info))
    server = SecAggServer(server_params, roster)
    clients = {i: SecAggClient(i, keys[i], roster, *_as_update(demo_update(n, round_info, None)))
               for i, n in zip(ids, names, strict=True)}
    outbox = server.start()
    while outbox:
        for i, msg in outbox.items():
            server.receive(clients[i].receive(msg))
        outbox = server.close_stage()
    assert server.result is not None
    return server.result.mean.astype(np.float32)


def _as_update(pair: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    return pair[0].astype(np.float64), pair[1]


def _quant(info: dict[str, object]) -> QuantizationConfig:
    return QuantizationConfig.fitted(num_clients=N)


def test_secure_round_matches_in_process(consortium: LocalConsortium) -> None:
    info = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3)
    done = consortium.wait_round(info["round_id"])
    assert done["status"] == "finished", done["error"]
    assert done["dropouts"] == []
    rest = _router(consortium, done["router_version"])
    exact = _expected(consortium, done, consortium.names)
    memory = _in_process(done, consortium.names)
    step = _step()
    # Both go through fixed-point with stochastic rounding: equal up to the quantization step.
    assert np.max(np.abs(rest - memory)) <= 2 * step
    assert np.max(np.abs(rest - exact)) <= step
    meta = consortium.admin.get("/v1/router/latest").json()
    assert meta["version"] == done["router_version"] and meta["length"] == LENGTH


def _step() -> float:
    """One quantization step of the rounds' fixed-point encoding."""
    # Plus float32 rounding of the published mean (values are O(0.1)).
    return 2.0 ** -QuantizationConfig.fitted(num_clients=N).scale_bits + 1e-6


def test_plain_fedavg_round_is_exact(consortium: LocalConsortium) -> None:
    info = consortium.create_round(kind="rm_fedavg", vector_length=LENGTH, min_clients=3)
    done = consortium.wait_round(info["round_id"])
    assert done["status"] == "finished", done["error"]
    rest = _router(consortium, done["router_version"])
    np.testing.assert_allclose(rest, _expected(consortium, done, consortium.names), atol=1e-6)


def test_tls_is_verified(consortium: LocalConsortium) -> None:
    assert consortium.server_url.startswith("https://")
    with pytest.raises(httpx.ConnectError):  # system CAs do not know the test CA
        httpx.get(f"{consortium.server_url}/v1/health", timeout=5)
    ok = httpx.get(f"{consortium.server_url}/v1/health", verify=consortium.verify, timeout=5)
    assert ok.json()["app"] == "fedmor-server"


def _wait_stage_past_first(c: LocalConsortium, round_id: int) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = c.round(round_id)
        if info["status"] != "open" or info["stage"] != "advertise_keys":
            return info
        time.sleep(0.01)
    raise TimeoutError("round never left advertise_keys")


def test_server_sigkill_mid_round_then_restart(consortium: LocalConsortium) -> None:
    before_ids = consortium.enrolled()
    latest = consortium.admin.get("/v1/router/latest").json()
    # A deadline long enough for every member to come back after the restart: the round must
    # resume, not fail on a slow machine.
    info = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                   stage_deadline_s=30.0)
    _wait_stage_past_first(consortium, info["round_id"])
    consortium.procs["server"].send_signal(signal.SIGKILL)
    consortium.procs.pop("server").wait()
    consortium.start_server()
    assert consortium.enrolled() == before_ids
    again = consortium.admin.get("/v1/router/latest").json()
    assert again["version"] >= latest["version"]
    old = consortium.admin.get(f"/v1/router/{latest['version']}")
    assert old.headers["x-fedmor-sha256"] == latest["sha256"]
    interrupted = consortium.wait_round(info["round_id"])
    with sqlite3.connect(consortium.server_cfg["db_path"]) as db:
        actions = [a for a, d in db.execute("SELECT action, detail FROM audit")
                   if json.loads(d).get("round_id") == info["round_id"]]
    # What docs/rest-api.md ("Crash safety") promises: the open round is rebuilt by replaying
    # its stored messages and resumed; with every member alive it finishes, nobody dropped.
    assert "round_resumed" in actions, actions
    assert interrupted["status"] == "finished", interrupted["error"]
    assert interrupted["dropouts"] == []
    nxt = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3)
    done = consortium.wait_round(nxt["round_id"])
    assert done["status"] == "finished", done["error"]
    assert done["dropouts"] == []


def test_listing_rounds_shows_history(consortium: LocalConsortium) -> None:
    rounds = consortium.admin.get("/v1/rounds").json()
    assert [r["round_id"] for r in rounds] == sorted(r["round_id"] for r in rounds)
    assert sum(r["status"] == "finished" for r in rounds) >= 3


def _wait_stored(c: LocalConsortium, round_id: int, stage: str, client_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with sqlite3.connect(c.server_cfg["db_path"]) as db:
            if db.execute("SELECT 1 FROM stage_messages WHERE round_id=? AND stage=? AND "
                          "client_id=?", (round_id, stage, client_id)).fetchone():
                return
        time.sleep(0.01)
    raise TimeoutError(f"{client_id} never sent {stage}")


def test_client_sigkilled_between_stages_resumes_the_round(consortium: LocalConsortium) -> None:
    holdout, victim = consortium.names[0], consortium.names[1]
    ids = dict(zip(consortium.names, consortium.enrolled(), strict=True))
    # The holdout is down, so the first stage cannot close: the victim has advertised its
    # round keys (the server holds them) and waits for the next stage when it is killed.
    consortium.stop(holdout)
    info = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                   stage_deadline_s=60.0)
    _wait_stored(consortium, info["round_id"], "advertise_keys", ids[victim])
    consortium.kill(victim)
    with sqlite3.connect(consortium.client_cfg[victim]["db_path"]) as db:
        saved = db.execute("SELECT state FROM round_state WHERE round_id=?",
                           (info["round_id"],)).fetchone()
    assert saved is not None and json.loads(saved[0])["stage"] == "share_keys"
    consortium.start_client(victim)
    consortium.start_client(holdout)
    done = consortium.wait_round(info["round_id"])
    # The restarted victim continued with its saved keys: no dropout, and the same aggregate.
    assert done["status"] == "finished", done["error"]
    assert done["dropouts"] == []
    rest = _router(consortium, done["router_version"])
    assert np.max(np.abs(rest - _in_process(done, consortium.names))) <= 2 * _step()
    assert np.max(np.abs(rest - _expected(consortium, done, consortium.names))) <= _step()
    with sqlite3.connect(consortium.client_cfg[victim]["db_path"]) as db:  # secrets are gone
        assert db.execute("SELECT COUNT(*) FROM round_state").fetchone() == (0,)


def _wait_sent(c: LocalConsortium, name: str, round_id: int) -> None:
    """Until ``name`` stored a message of ``round_id`` (it is in the round)."""
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing check
    while True:
        with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
            if db.execute("SELECT 1 FROM sent WHERE round_id=?", (round_id,)).fetchone():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} sent nothing in round {round_id}")
        time.sleep(0.01)


def test_client_killed_mid_round_round_completes(consortium: LocalConsortium) -> None:
    victim = consortium.names[-1]
    # The victim polls slowly, so once it stored its first message it is still far from its
    # masked input when we kill it; the deadline only has to outlast the honest members.
    consortium.stop(victim)
    consortium.start_client(victim, poll_interval_s=2.0)
    info = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                   stage_deadline_s=15.0)
    _wait_sent(consortium, victim, info["round_id"])
    consortium.kill(victim)
    done = consortium.wait_round(info["round_id"])
    assert done["status"] == "finished", done["error"]
    victim_id = consortium.enrolled()[consortium.names.index(victim)]
    assert done["dropouts"] == [victim_id]
    survivors = consortium.names[:-1]
    rest = _router(consortium, done["router_version"])
    assert np.max(np.abs(rest - _expected(consortium, done, survivors))) <= _step()
