"""Binary (octet-stream) stage messages, in-process: parsed once, covered by the request
signature, refused with a 4xx and a message when malformed, and replayed after a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from client_app._round_walk import MemberRound, ready_update
from sdk.rounds import ROUND_KINDS
from sdk.rounds._fedavg_kind import encode_update
from sdk.secagg import MaskedInput, QuantizationConfig
from sdk.wire import RoundInfo, generate_key
from server_app import ServerSettings
from server_app._app import create_app

from .conftest import Member

ADMIN = {"authorization": "Bearer adm"}


def _detail(resp: Any, status: int, needle: str) -> None:
    assert resp.status_code == status, resp.text
    assert needle in resp.json()["detail"], resp.json()["detail"]


def test_binary_update_malformed_bodies_are_4xx(server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, b) = server
    r = tc.post("/v1/rounds", json={"kind": "rm_fedavg", "vector_length": 3, "min_clients": 2},
                headers=ADMIN)
    path = f"/v1/rounds/{r.json()['round_id']}/stages/update"
    good = encode_update(np.array([1, 2, 3], np.float32), 2.0)
    nan = encode_update(np.array([1, np.nan, 3], np.float32), 2.0)
    for body, needle in [(good[:-1], "binary update has 19 bytes"), (b"", "empty"),
                         (nan, "NaN"), (encode_update(np.ones(3), -1.0), "weight"),
                         (encode_update(np.ones(3), float("inf")), "weight")]:
        _detail(a.send(path, body), 422, needle)
    _detail(a.send(path, good, media="text/plain"), 415, "not accepted")
    # The signature covers the raw bytes: another body than the signed one is refused.
    _detail(a.send(path, good, signed_body=encode_update(np.ones(3), 2.0)), 403, "bad signature")
    first, retry = a.send(path, good), a.send(path, good)
    assert first.status_code == retry.status_code == 200 and first.json() == retry.json()
    _detail(a.send(path, encode_update(np.ones(3), 5.0)), 409, "different message")
    assert b.send(path, encode_update(np.full(3, 4.0), 2.0)).status_code == 200
    info = a.call("GET", path.rsplit("/stages", 1)[0]).json()
    assert info["status"] == "finished"
    blob = a.call("GET", f"/v1/router/{info['router_version']}").content
    assert np.frombuffer(blob, "<f4").tolist() == [2.5, 3.0, 3.5]


def _halves(members: list[Member], info: RoundInfo) -> dict[str, MemberRound]:
    terms = ROUND_KINDS[info.kind].terms(info)
    return {m.client_id: MemberRound.join(
        terms, client_id=m.client_id, key=m.key,
        update=ready_update(np.full(4, 0.25 * (i + 1)), i + 1), state=None)
        for i, m in enumerate(members)}


def _stage(members: list[Member], halves: dict[str, MemberRound], rid: int,
           stage: str) -> dict[str, Any]:
    """Every member fetches its input and sends its message; returns the messages."""
    sent = {}
    for m in members:
        inp = m.call("GET", f"/v1/rounds/{rid}/stages/{stage}").json()
        assert inp["ready"], inp
        msg = halves[m.client_id].message(stage, inp["payload"])
        path = f"/v1/rounds/{rid}/stages/{stage}"
        resp = m.send(path, msg) if isinstance(msg, bytes) else m.call("POST", path,
                                                                         {"payload": msg})
        assert resp.status_code == 200, resp.text
        sent[m.client_id] = msg
    return sent


def _secure_round(tc: TestClient, members: list[Member]) -> tuple[RoundInfo, dict[str, MemberRound]]:
    r = tc.post("/v1/rounds", headers=ADMIN, json={
        "kind": "router_secagg", "vector_length": 4, "min_clients": 2,
        "params": {"threshold": 2, "degree": 1}})
    assert r.status_code == 200, r.text
    info = RoundInfo.model_validate(r.json())
    return info, _halves(members, info)


def _check_result(member: Member, rid: int) -> None:
    info = member.call("GET", f"/v1/rounds/{rid}").json()
    assert info["status"] == "finished", info["error"]
    got = np.frombuffer(member.call("GET", f"/v1/router/{info['router_version']}").content, "<f4")
    q = QuantizationConfig.fitted(num_clients=2, clip_range=1.0, max_weight=1000)  # the kind's
    # Weights 1 and 2 on 0.25 and 0.5: (0.25 + 1.0) / 3, up to stochastic rounding (one unit of
    # max_weight / scale per client on the weighted sum) and float32.
    assert np.max(np.abs(got - 1.25 / 3)) <= 2 * q.max_weight / (q.scale * 3) + 1e-7


def test_secure_round_malformed_masked_inputs_are_422(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, members = server
    info, halves = _secure_round(tc, members)
    rid, a = info.round_id, members[0]
    path = f"/v1/rounds/{rid}/stages/advertise_keys"
    _detail(a.send(path, b"\x00" * 10), 422, "expects a JSON message")
    _stage(members, halves, rid, "advertise_keys")
    _stage(members, halves, rid, "share_keys")
    path = f"/v1/rounds/{rid}/stages/masked_input_collection"
    inp = a.call("GET", path).json()
    real = halves[a.client_id].message("masked_input_collection", inp["payload"])
    assert isinstance(real, bytes)
    msg = MaskedInput.from_bytes(real)
    for bad, needle in [
            (b"\x01", "not a secure-aggregation message"),
            (b"\xff\xff" + b"x" * 8, "not a secure-aggregation message"),
            (real[:-4], "masked vector has"),
            (msg.model_copy(update={"sender": 99}).to_bytes(), "authenticated client's"),
            (msg.model_copy(update={"round_id": "round-x"}).to_bytes(), "message of round")]:
        _detail(a.send(path, bad), 422, needle)
    assert a.send(path, real).status_code == 200  # refused bodies left no trace
    b = members[1]
    inp = b.call("GET", path).json()
    b_msg = halves[b.client_id].message("masked_input_collection", inp["payload"])
    assert isinstance(b_msg, bytes) and b.send(path, b_msg).status_code == 200
    for stage in ("consistency_check", "unmasking"):
        _stage(members, halves, rid, stage)
    _check_result(a, rid)


def test_restart_replays_binary_messages(server: tuple[TestClient, list[Member]],
                                         tmp_path: Path) -> None:
    tc, members = server
    info, halves = _secure_round(tc, members)
    rid = info.round_id
    for stage in ("advertise_keys", "share_keys"):
        _stage(members, halves, rid, stage)
    _stage(members[:1], halves, rid, "masked_input_collection")
    with sqlite3.connect(tmp_path / "s.db") as db:
        stored = dict(db.execute("SELECT stage, typeof(payload) FROM stage_messages WHERE "
                                 "round_id=?", (rid,)).fetchall())
    assert stored == {"advertise_keys": "text", "share_keys": "text",
                      "masked_input_collection": "blob"}  # the raw body, as it arrived
    # A second server process on the same store rebuilds the round from the stored messages
    # (the first member's masked input is a BLOB) and finishes it.
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=tmp_path / "roster.json", admin_token="adm",  # type: ignore[arg-type]
                         public_urls=["http://testserver"])
    with TestClient(create_app(cfg)) as tc2:
        again = [Member(tc2, m.key, m.client_id) for m in members]
        _stage(again[1:], halves, rid, "masked_input_collection")
        for stage in ("consistency_check", "unmasking"):
            _stage(again, halves, rid, stage)
        _check_result(again[0], rid)
        # A stranger's key cannot sign for a member.
        forged = Member(tc2, generate_key(), members[0].client_id)
        _detail(forged.call("GET", f"/v1/rounds/{rid}"), 403, "bad signature")
