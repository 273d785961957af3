"""Finding 1: one member cannot poison the global router. Weights and values are bounded per
round kind, an aggregate out of range is never published (the round fails with the reason),
and the operator can roll the router back to an earlier version."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import sdk.cli
from client_app._round_walk import ready_update
from fedmor_local import LocalConsortium
from fedmor_local._local import ADMIN_TOKEN
from sdk.secagg._schema import MaskedInput
from tests.apps.conftest import Member, in_process_secure_round

ADMIN = {"authorization": "Bearer adm"}


def _update(weight: float, values: list[float]) -> bytes:
    return struct.pack("<d", weight) + np.asarray(values, dtype="<f4").tobytes()


def _fedavg(tc: TestClient, **params: Any) -> int:
    r = tc.post("/v1/rounds", headers=ADMIN, json={"kind": "rm_fedavg", "vector_length": 2,
                                                   "min_clients": 2, "params": params})
    assert r.status_code == 200, r.text
    return int(r.json()["round_id"])


def test_a_huge_weight_or_value_is_refused_and_the_round_stays_clean(
        server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, b) = server
    rid = _fedavg(tc)
    path = f"/v1/rounds/{rid}/stages/update"
    r = a.send(path, _update(1e300, [3e38, 3e38]))
    assert r.status_code == 422 and "over this round's max_weight" in r.json()["detail"]
    r = a.send(path, _update(1.0, [3e38, 3e38]))
    assert r.status_code == 422 and "outside this round's range" in r.json()["detail"]
    assert a.send(path, _update(2.0, [1.0, -1.0])).status_code == 200
    assert b.send(path, _update(2.0, [0.0, 1.0])).status_code == 200
    info = tc.get(f"/v1/rounds/{rid}", headers=ADMIN).json()
    assert info["status"] == "finished"
    blob = tc.get(f"/v1/router/{info['router_version']}", headers=ADMIN).content
    assert np.frombuffer(blob, dtype="<f4").tolist() == [0.5, 0.0]
    # Bad bounds are a 422 at creation, not a 500.
    r = tc.post("/v1/rounds", headers=ADMIN, json={"kind": "rm_fedavg", "vector_length": 2,
                                                   "params": {"max_weight": -1}})
    assert r.status_code == 422 and "max_weight" in r.json()["detail"]


def test_a_tampered_secure_aggregate_is_not_published(tmp_path: Path) -> None:
    rounds, store, rid, halves = in_process_secure_round(
        tmp_path, 4, lambda _: ready_update(np.full(4, 0.25, dtype=np.float32), 1))
    attacker = next(iter(halves))
    for stage in rounds.info(rid).stages:
        for client, half in halves.items():
            payload = half.message(stage, rounds.broadcast(rid, stage, client).payload or {})
            if client == attacker and isinstance(payload, bytes):
                sent = MaskedInput.from_bytes(payload)
                words = sent.vector().copy()
                words[0] = (int(words[0]) + 2**30) % 2**32  # shift element 0 far, masks intact
                payload = sent.model_copy(update={"masked": words.tobytes()}).to_bytes()
            rounds.submit(rid, stage, client, payload)
    info = rounds.info(rid)
    assert info.status == "failed" and "outside [-2, 2]" in (info.error or "")
    assert info.router_version is None and store.version() is None  # nothing published


def test_the_operator_rolls_the_router_back(server: tuple[TestClient, list[Member]]) -> None:
    tc, (a, b) = server
    versions = []
    for values in ([1.0, 1.0], [2.0, 2.0]):
        rid = _fedavg(tc)
        for m in (a, b):
            assert m.send(f"/v1/rounds/{rid}/stages/update", _update(1.0, values)).status_code \
                == 200
        versions.append(tc.get(f"/v1/rounds/{rid}", headers=ADMIN).json()["router_version"])
    assert a.call("POST", "/v1/router/rollback", {"version": 1}).status_code == 403  # a member
    assert tc.post("/v1/router/rollback", json={"version": 99},
                   headers=ADMIN).status_code == 404
    r = tc.post("/v1/router/rollback", json={"version": versions[0]}, headers=ADMIN)
    assert r.status_code == 200, r.text
    latest = tc.get("/v1/router/latest", headers=ADMIN).json()
    assert latest["version"] == versions[1] + 1 == r.json()["version"]
    assert np.frombuffer(tc.get(f"/v1/router/{latest['version']}", headers=ADMIN).content,
                         dtype="<f4").tolist() == [1.0, 1.0]


def test_fedmor_router_rollback_over_https(hostile: LocalConsortium,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rid = hostile.create_round(kind="rm_fedavg", vector_length=8, min_clients=3)["round_id"]
    version = hostile.wait_round(rid)["router_version"]
    assert version is not None
    argv = ["router", "rollback", str(version), "--server", hostile.server_url,
            "--ca", str(hostile.pki[0] if hostile.pki else "")]
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", "wrong")
    assert sdk.cli.main(argv) == 1
    assert "rollback refused by the server (401)" in capsys.readouterr().err
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN_TOKEN)
    assert sdk.cli.main(argv) == 0
    latest = hostile.admin.get("/v1/router/latest").json()
    assert f"restored as version {latest['version']}" in capsys.readouterr().out
    assert hostile.admin.get(f"/v1/router/{latest['version']}").content == \
        hostile.admin.get(f"/v1/router/{version}").content
