"""``sdk.wire.ImageCache`` and ``image_bytes``: the one image cache and the one check of sent
image bytes that the aligner, the server and the member share."""

from __future__ import annotations

import base64
import hashlib

import pytest

from sdk.wire import ImageCache, PayloadError, image_bytes


def test_the_cache_drops_the_least_recently_used_past_either_bound() -> None:
    by_count = ImageCache[bytes](max_items=2)
    by_count.put("a", b"1")
    by_count.put("b", b"2")
    assert by_count.get("a") == b"1"  # now "b" is the least recently used
    by_count.put("c", b"3")
    assert by_count.get("b") is None and by_count.values() == [b"1", b"3"]
    by_bytes = ImageCache[bytes](max_bytes=10, size_of=len)
    for key in "abc":
        by_bytes.put(key, b"x" * 4)
    assert len(by_bytes) == 2 and by_bytes.bytes == 8 and by_bytes.get("a") is None
    by_bytes.put("huge", b"x" * 11)  # larger than the whole bound: never kept, evicts nothing
    assert by_bytes.get("huge") is None and len(by_bytes) == 2
    with pytest.raises(ValueError, match="size_of"):
        ImageCache[bytes](max_bytes=10)


def test_sent_bytes_must_be_base64_and_hash_to_their_name() -> None:
    data = b"\x89PNG not really"
    digest = hashlib.sha256(data).hexdigest()
    assert image_bytes(digest, base64.b64encode(data).decode()) == data
    with pytest.raises(PayloadError, match="not base64"):
        image_bytes(digest, "not base64!")
    with pytest.raises(PayloadError, match="do not hash"):
        image_bytes(hashlib.sha256(b"another image").hexdigest(),
                    base64.b64encode(data).decode())
