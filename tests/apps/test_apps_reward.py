"""The reward-query broker against real client-app processes: push and pull, image cache."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from client_app import HashScorer
from fedmor_local import LocalConsortium
from sdk.wire import ImageRef, RewardResponse, load_private_key
from server_app import RewardBroker, Store
from tests._images import png

Item = tuple[ImageRef, str, str]
ITEMS: list[Item] = [(ImageRef.of(png(48, i % 2)), f"what is shown? {i}", f"answer {i}")
                     for i in range(4)]


def _reference(items: list[Item]) -> list[float]:
    images = [Image.open(io.BytesIO(i.data)).convert("RGB") for i, _, _ in items]
    return HashScorer().score(images, [p for _, p, _ in items], [r for _, _, r in items])


def _broker(c: LocalConsortium, mode: str) -> RewardBroker:
    """The server's broker, in this process, on the running server's own store and key."""
    store = Store(c.server_cfg["db_path"])
    key = load_private_key(Path(c.server_cfg["identity_key"]))
    return RewardBroker(store, key, verify=c.verify, mode=mode, timeout_s=60,
                        allow_private=True)  # members on 127.0.0.1


def _query(broker: RewardBroker, client_id: str, items: list[Item]) -> list[float]:
    async def go() -> list[float]:
        try:
            return await broker.query(client_id, [i for i, _, _ in items],
                                      [p for _, p, _ in items], [r for _, _, r in items])
        finally:
            await broker.aclose()
    return asyncio.run(go())


def test_push_scores_match_in_process_and_cache_saves_bytes(consortium: LocalConsortium) -> None:
    client_id = consortium.enrolled()[2]
    broker = _broker(consortium, "push")
    first = _query(broker, client_id, ITEMS)
    uncached = broker.bytes_sent
    assert first == pytest.approx(_reference(ITEMS))
    broker = _broker(consortium, "push")
    second = _query(broker, client_id, ITEMS)
    assert second == first
    timing = broker.last_server_timing  # the client app's Server-Timing header
    assert set(timing) == {"score", "app"} and 0 < timing["score"] <= timing["app"]
    assert broker.bytes_sent < uncached / 2  # images went by hash only
    db = consortium.client_cfg[consortium.names[2]]["db_path"]
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT caller, items, item_hashes FROM query_audit").fetchall()
    assert [r[:2] for r in rows[-2:]] == [("server", 4), ("server", 4)]
    assert "what is shown" not in repr(rows)  # the audit keeps hashes, not inputs


def test_push_resends_images_the_client_lost(consortium: LocalConsortium) -> None:
    client_id, name = consortium.enrolled()[3], consortium.names[3]
    broker = _broker(consortium, "push")
    _query(broker, client_id, ITEMS[:2])
    # The member restarts with its image cache purged: what it decoded in memory went too.
    consortium.stop(name)
    with sqlite3.connect(consortium.client_cfg[name]["db_path"]) as conn:
        conn.execute("DELETE FROM images")
    consortium.start_client(name)
    broker = _broker(consortium, "push")
    assert _query(broker, client_id, ITEMS[:2]) == pytest.approx(_reference(ITEMS[:2]))
    # Sent by hash, refused as unknown (409), sent again with its bytes.
    assert broker.bytes_sent > len(ITEMS[0][0].data)


def test_pull_mode_round_trip(consortium: LocalConsortium) -> None:
    client_id = consortium.enrolled()[1]
    broker = _broker(consortium, "pull")
    items: list[Item] = [(ImageRef.of(png(48, 7)), "pull?", "yes")]
    assert _query(broker, client_id, items) == pytest.approx(_reference(items))
    uncached = broker.bytes_sent  # what the member fetched: counted as in push mode
    assert uncached > len(png(48, 7))
    broker = _broker(consortium, "pull")
    assert _query(broker, client_id, items) == pytest.approx(_reference(items))
    assert 0 < broker.bytes_sent < uncached / 2  # the image went by hash only


def test_server_timing_header_is_parsed_leniently() -> None:
    read = RewardResponse.timings
    assert read("score;dur=12.5, app;dur=14") == {"score": 12.5, "app": 14.0}
    assert read(RewardResponse.timing_header(score=0.0125, app=0.014)) == {"score": 12.5,
                                                                          "app": 14.0}
    assert read("") == {}
    assert read("score;desc=x, app;dur=nan, db;dur=oops, ;dur=3, cache;dur=0.5") == \
        {"cache": 0.5}
