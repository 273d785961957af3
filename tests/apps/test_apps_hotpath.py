"""Work the request paths no longer repeat: a query's image digests, a closed stage's decoded
broadcast, a round's decoded spec, a float64 copy of a float32 update, a scan of the nonces on
every request, the broker's writes for images a client already holds; and the async HTTP
client's sniffio."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import server_app._rewards._broker as broker_module
from client_app._round_walk import ready_update
from sdk.wire import ImageRef, RoundSpec, generate_key, public_key_b64
from sdk.wire._auth import authority_of
from server_app import Store
from server_app._rounds._manager import RoundManager
from tests._images import png

from .conftest import in_process_secure_round, push_member


def _recording_bodies(app: Any, bodies: list[bytes]) -> Any:
    """``app`` as it is, keeping the body of each ``POST /v1/reward`` it receives."""
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/reward":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recorded() -> Any:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                bodies.append(b"".join(chunks))
            return message

        await app(scope, recorded, send)
    return wrapped


def _in_client_app() -> bool:
    """Whether the caller runs on behalf of the member app (served in this process)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("client_app"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def test_an_image_is_hashed_once_when_its_reference_is_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from client_app import HashScorer

    image = png(8, 1)
    calls: list[bytes] = []  # the server side's hashes of the image
    sha256 = hashlib.sha256

    def counting(data: bytes = b"") -> Any:
        if not _in_client_app():  # the member checks what it received: its own business
            calls.append(bytes(data))
        return sha256(data)

    bodies: list[bytes] = []
    store, server_key = Store(tmp_path / "s.db"), generate_key()
    with push_member(tmp_path, store, server_key, "m0", HashScorer(),
                     wrap=lambda app: _recording_bodies(app, bodies)):
        broker = broker_module.RewardBroker(store, server_key, mode="push",
                                            allow_private=True)  # a member on 127.0.0.1
        monkeypatch.setattr(hashlib, "sha256", counting)
        ref = ImageRef.of(image)

        async def run() -> list[float]:
            try:  # the reference's hash serves the cache lookup, the body and the bookkeeping
                return await broker.query("c-m0", [ref, ref], ["p", "q"], ["r", "r"])
            finally:
                await broker.aclose()

        scores = asyncio.run(run())
        monkeypatch.undo()
    assert len(scores) == 2 and all(abs(s) <= HashScorer.clip for s in scores)
    assert calls.count(image) == 1 and ref.sha256 == sha256(image).hexdigest()
    sent = json.loads(bodies[0])["items"]  # the bytes once per query, then by hash
    assert [i.get("image_b64") is not None for i in sent] == [True, False]
    assert ref == ImageRef(ref.sha256, b"")  # a reference is its hash: eq ignores the bytes


def test_async_http_client_finds_sniffio() -> None:
    # httpcore imports sniffio on every async request; a missing one is a failed import (a
    # search of sys.path) each time, on the reward-query path.
    assert importlib.util.find_spec("sniffio") is not None


def _secure_round(tmp_path: Path, update: np.ndarray) -> tuple[RoundManager, Store, int,
                                                                    dict[str, Any]]:
    return in_process_secure_round(tmp_path, update.shape[0], lambda _: ready_update(update, 1))


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
    assert not [k for k in rounds._rounds.closures if k[0] == rid]  # nothing kept after the end
    fresh = Store(tmp_path / "s.db")  # and the store still answers for the finished round
    assert fresh.closure(rid, stages[0]) == closure(rid, stages[0])


def test_secure_client_half_keeps_a_float32_update_without_a_copy(tmp_path: Path) -> None:
    update = np.linspace(-0.5, 0.5, 8, dtype=np.float32)
    _, _, _, halves = _secure_round(tmp_path, update)
    half = next(iter(halves.values())).half
    half.provide(update, 1)  # what the driver does before the masked-input stage
    kept = half._sm._update  # type: ignore[attr-defined]
    assert kept.dtype == np.float32 and np.shares_memory(kept, update)


def test_stage_requests_decode_each_round_spec_once(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rounds, _, rid, halves = _secure_round(tmp_path, np.zeros(4))
    decodes: list[str] = []
    parse = RoundSpec.model_validate_json

    def counting(data: Any, **kw: Any) -> RoundSpec:
        decodes.append(data)
        return parse(data, **kw)

    monkeypatch.setattr(RoundSpec, "model_validate_json", counting)
    rounds._rounds._specs.clear()  # as after a restart: the first request decodes it
    stages = list(rounds.info(rid).stages)
    for stage in stages:
        for client, half in halves.items():
            inp = rounds.broadcast(rid, stage, client)
            rounds.submit(rid, stage, client, half.message(stage, inp.payload or {}))
            following = rounds.next_stage(rid, stage)  # what an ack's ``wait_next_s`` reads
            if following is not None:
                rounds.broadcast(rid, following, client)
            rounds.awaiting(client)  # the work poll's path too
            rounds.tick()
    assert rounds.info(rid).status == "finished"
    assert len(decodes) == 1  # ~600 decodes per secure round before (every lookup)


@pytest.mark.parametrize("kind", ["server", "client"])
def test_nonce_purge_is_throttled_and_replays_are_still_refused(
        tmp_path: Path, kind: str) -> None:
    from client_app._store import ClientStore

    store: Any = Store(tmp_path / "s.db") if kind == "server" else ClientStore(tmp_path / "c.db")
    db = store._db
    now = time.time()
    assert store.use_nonce("a", "expired1", now - 10_000, keep_s=60)
    db.execute("UPDATE nonces SET ts=? WHERE nonce='expired1'", (now - 10_000,))
    assert store.use_nonce("a", "fresh001", now, keep_s=60)
    # Not purged yet: a purge scans the table, so it runs at most every ``every_s`` seconds.
    assert {r[0] for r in db.execute("SELECT nonce FROM nonces")} == {"expired1", "fresh001"}
    assert not store.use_nonce("a", "fresh001", now, keep_s=60)  # a replay: refused
    store._nonce_purge._last -= store._nonce_purge.every_s  # the next purge is due
    assert store.use_nonce("b", "fresh001", now, keep_s=60)  # another sender's same nonce
    assert {r[0] for r in db.execute("SELECT nonce FROM nonces")} == {"fresh001"}
    assert not store.use_nonce("a", "fresh001", now, keep_s=60)
    # One b-tree per nonce table (a rowid table plus its key index wrote two pages each time).
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name='nonces'").fetchone()[0]
    assert "WITHOUT ROWID" in sql


def test_broker_stores_and_marks_only_new_images(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from client_app import HashScorer

    store, server_key = Store(tmp_path / "s.db"), generate_key()
    with push_member(tmp_path, store, server_key, "m0", HashScorer()):
        calls: dict[str, list[Any]] = {"client": [], "put_images": [], "mark_cached": []}
        for name in calls:
            real = getattr(store, name)

            def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
                calls[_name].append(args)
                return _real(*args)

            monkeypatch.setattr(store, name, spy)
        broker = broker_module.RewardBroker(store, server_key, mode="push",
                                            allow_private=True)  # a member on 127.0.0.1
        a, b = (ImageRef.of(png(8, i)) for i in range(2))

        async def run() -> None:
            await broker.query("c-m0", [a], ["p"], ["r"])
            await broker.query("c-m0", [a, b], ["p"] * 2, ["r"] * 2)
            await broker.query("c-m0", [b, a], ["p"] * 2, ["r"] * 2)
            await broker.aclose()

        asyncio.run(run())
    assert [sorted(imgs) for (imgs,) in calls["put_images"]] == [[a.sha256], [b.sha256]]
    assert [h for _, h in calls["mark_cached"]] == [[a.sha256], [b.sha256]]
    assert len(calls["client"]) == 1  # an enrolled client's row never changes
    # Every query is still audited, cached images or not; and both images are kept.
    assert [r.action for r in store.audit_log()].count("reward_query") == 3
    assert store.image(a.sha256) == a.data and store.image(b.sha256) == b.data


def test_client_app_reads_the_learned_server_key_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from client_app import ClientSettings, HashScorer
    from client_app._app import create_client_app
    from client_app._store import ClientStore
    from sdk.wire import sign_headers

    key = generate_key()
    first = ClientStore(tmp_path / "c.db")  # as enrollment leaves it: the key is in the store
    first.put("server_public_key", public_key_b64(key))
    first.put("client_id", "c-me")
    first.close()
    app = create_client_app(ClientSettings(db_path=tmp_path / "c.db",
                                           identity_key=tmp_path / "c.pem",
                                           public_urls=["http://testserver"]), HashScorer())
    reads: list[str] = []
    get = app.state.store.get
    monkeypatch.setattr(app.state.store, "get", lambda k: reads.append(k) or get(k))
    image = b"\x89PNG not really"
    item = {"image_sha256": hashlib.sha256(image).hexdigest(), "prompt": "p", "response": "r"}
    with TestClient(app) as tc:
        for _ in range(3):
            body = json.dumps({"items": [item]}).encode()
            headers = sign_headers(key, sender="server", method="POST", path="/v1/reward",
                                   body=body, recipient="c-me",
                                   authority=authority_of(str(tc.base_url)))
            resp = tc.post("/v1/reward", content=body, headers=headers)
            assert resp.status_code == 409  # authenticated (the image is simply unknown)
        forged = sign_headers(generate_key(), sender="server", method="POST",
                              path="/v1/reward", body=body, recipient="c-me",
                              authority=authority_of(str(tc.base_url)))
        assert tc.post("/v1/reward", content=body, headers=forged).status_code == 403
    assert reads.count("server_public_key") == 1


def test_broker_marks_an_image_the_client_lost_again_after_the_resend(tmp_path: Path) -> None:
    import asyncio

    from client_app import ClientStore, HashScorer
    from fedmor_local import free_port

    store, server_key = Store(tmp_path / "s.db"), generate_key()
    item = ImageRef.of(png(8, 5))
    bodies: list[bytes] = []
    port = free_port()

    def query() -> list[float]:
        async def run() -> list[float]:
            broker = broker_module.RewardBroker(store, server_key, mode="push",
                                                allow_private=True)  # a member on 127.0.0.1
            try:
                return await broker.query("c-m0", [item], ["p"], ["r"])
            finally:
                await broker.aclose()
        return asyncio.run(run())

    def member() -> Any:
        return push_member(tmp_path, store, server_key, "m0", HashScorer(), port=port,
                           wrap=lambda app: _recording_bodies(app, bodies))

    with member():
        first = query()
    # The member restarts with its image cache purged (its retention, say): it lost the image.
    ClientStore(tmp_path / "m0.db").delete("DELETE FROM images", ())
    with member():
        assert query() == first  # asked for the image (409), sent it again, scored it
        assert query() == first
    sent = [json.loads(b)["items"][0].get("image_b64") is not None for b in bodies]
    assert sent == [True, False, True, False]  # sent, cached, resent on request, cached again
    assert store.cached("c-m0") == {item.sha256}
