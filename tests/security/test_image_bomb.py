"""Finding 2: a small PNG that declares a huge size is refused before decoding; a pull-mode
member keeps serving after it and the next round completes."""

from __future__ import annotations

import base64
import hashlib
import struct
import time
import zlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from client_app._runner import ClientRunner
from fedmor_local import LocalConsortium
from server_app._rewards._broker import BrokerError
from tests._images import png
from tests.security.conftest import (
    PULL,
    PUSH,
    broker,
    client_db,
    client_id,
    query,
    server_signed_post,
)


def bomb(side: int = 30_000) -> bytes:
    """A PNG whose header declares ``side`` x ``side`` RGB pixels, with a few rows of data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = zlib.compress(b"\0" * (3 * side + 1) * 4)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0,
                                                                0, 0))
            + chunk(b"IDAT", rows) + chunk(b"IEND", b""))


def test_push_member_refuses_a_bomb_with_422_and_stores_nothing(
        hostile: LocalConsortium) -> None:
    data = bomb()
    digest = hashlib.sha256(data).hexdigest()
    item = {"image_sha256": digest, "prompt": "p", "response": "r",
            "image_b64": base64.b64encode(data).decode()}
    url = hostile.client_cfg[PUSH]["public_url"]
    used = client_db(hostile, PUSH, "SELECT COALESCE(SUM(items), 0) FROM query_audit")
    resp = server_signed_post(hostile, url, "/v1/reward", {"items": [item, item]},
                              recipient=client_id(hostile, PUSH))
    assert resp.status_code == 422, resp.text
    assert "over the limit of 1024 px a side" in resp.json()["detail"]
    assert client_db(hostile, PUSH, "SELECT sha256 FROM images WHERE sha256=?", (digest,)) == []
    assert client_db(hostile, PUSH, "SELECT COALESCE(SUM(items), 0) FROM query_audit") == used
    # The app still scores a good batch.
    good = [(png(seed=1), "p", "r")]
    assert len(query(broker(hostile, "push"), client_id(hostile, PUSH), good)) == 1


def test_pull_member_answers_an_error_and_keeps_serving(hostile: LocalConsortium) -> None:
    cid = client_id(hostile, PULL)
    with pytest.raises(BrokerError, match="over the limit"):
        query(broker(hostile, "pull"), cid, [(bomb(), "p", "r")])
    assert client_db(hostile, PULL, "SELECT sha256 FROM images WHERE sha256=?",
                     (hashlib.sha256(bomb()).hexdigest(),)) == []
    good = [(png(seed=2), "p", "r")]
    assert len(query(broker(hostile, "pull"), cid, good)) == 1  # the worker still runs
    info = hostile.create_round(kind="rm_fedavg", vector_length=8, min_clients=3,
                                stage_deadline_s=30)
    assert hostile.wait_round(info["round_id"])["status"] == "finished"


def test_health_reports_a_dead_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def dies(self: ClientRunner) -> None:
        raise MemoryError("decoding took it all")

    monkeypatch.setattr(ClientRunner, "run_forever", dies)
    cfg = ClientSettings(db_path=tmp_path / "c.db", identity_key=tmp_path / "c.pem",
                         server_url="http://127.0.0.1:9", demo=True)
    with TestClient(create_client_app(cfg, HashScorer(), start_runner=True)) as tc:
        deadline = time.monotonic() + 10
        while (r := tc.get("/v1/health")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert r.status_code == 503
        assert r.json()["status"] == "degraded" and "decoding took it all" in r.json()["detail"]
