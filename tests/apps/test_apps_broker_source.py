"""BrokerRewardSource: a selection's client index k reaches member ``client_ids[k]`` with the
image references unchanged; a member that fails gives the failure value (or the error)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sdk.wire import ImageRef, generate_key, public_key_b64
from server_app import BrokerError, BrokerRewardSource, RewardBroker, Store


def _broker(tmp_path: Path, db: str = "s.db") -> RewardBroker:
    """Two enrolled push members, ``c-m0`` and ``c-m1``, at an address nobody listens on."""
    store = Store(tmp_path / db)
    for name in ("m0", "m1"):
        key = public_key_b64(generate_key())
        store.upsert_roster(name, key, hashlib.sha256(f"token-{name}".encode()).hexdigest())
        store.enroll(name=name, token=f"token-{name}", public_key=key,
                     reward_url="http://127.0.0.1:9", new_id=f"c-{name}", clip_bound=1.0)
    return RewardBroker(store, generate_key(), mode="push", timeout_s=5)


def _score(source: BrokerRewardSource, k: int, images: list[Any]) -> list[float]:
    async def go() -> list[float]:
        try:
            return await source.score(k, images, ["p"] * len(images), ["r"] * len(images))
        finally:
            await source.broker.aclose()
    return asyncio.run(go())


def test_index_k_asks_member_k_with_the_references_as_they_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = _broker(tmp_path)
    asked: list[tuple[str, list[dict[str, Any]]]] = []

    async def push(client_id: str, url: str, items: list[Any], images: dict[str, ImageRef],
                   cached: set[str]) -> list[float]:
        asked.append((client_id, [i.model_dump() for i in items]))
        assert all(images[i.image_sha256] is ref for i, ref in zip(items, refs, strict=True))
        return [0.25] * len(items)

    monkeypatch.setattr(broker, "_push", push)
    refs = [ImageRef.of(b"\xff\xd8 a jpeg as the aligner made it")] * 2
    source = BrokerRewardSource(broker, ["c-m0", "c-m1"])
    assert _score(source, 1, refs) == [0.25, 0.25]
    assert [who for who, _ in asked] == ["c-m1"]
    assert [i["image_sha256"] for i in asked[0][1]] == [refs[0].sha256] * 2
    assert [source.judge(refs[0], "p", "r") for _ in range(3)] == ["c-m1", "c-m1", ""]


def test_a_failing_member_gives_the_failure_value_or_the_error(tmp_path: Path) -> None:
    ref = ImageRef.of(b"image")
    tolerant = BrokerRewardSource(_broker(tmp_path), ["c-m0"], failure=-2.0)
    assert _score(tolerant, 0, [ref, ref]) == [-2.0, -2.0]  # nobody answers at 127.0.0.1:9
    assert tolerant.failed == 2 and tolerant.judge(ref, "p", "r") == ""
    strict = BrokerRewardSource(_broker(tmp_path, "strict.db"), ["c-m0"])
    with pytest.raises(BrokerError, match="unreachable"):
        _score(strict, 0, [ref])


def test_a_pil_image_or_a_bad_index_is_refused(tmp_path: Path) -> None:
    source = BrokerRewardSource(_broker(tmp_path), ["c-m0"])
    with pytest.raises(TypeError, match="image references"):
        _score(source, 0, [Image.new("RGB", (4, 4))])
    with pytest.raises(IndexError, match="out of range"):
        _score(source, 1, [ImageRef.of(b"image")])
