import pytest
import torch
from PIL import Image

from sdk.router import (
    EncodedBatch,
    Encoder,
    HashingEncoder,
    HashingEncoderConfig,
    concat_batches,
    image_digest,
    image_ref,
)
from sdk.router._encoder import ImageFeatureCache
from sdk.router._errors import RouterShapeError
from sdk.wire import ImageRef, PayloadError


def _img(color: tuple[int, int, int]) -> Image.Image:
    return Image.new("RGB", (20, 20), color)


def test_hashing_encoder_shapes_and_mask() -> None:
    enc = HashingEncoder(HashingEncoderConfig(dim=8, image_grid=2, max_prompt_tokens=3))
    assert isinstance(enc, Encoder)
    out = enc.encode([_img((255, 0, 0)), None], ["what color is it", "hi"], ["red", "a b"])
    # row 0: 4 image tokens + 3 prompt words (truncated from 4) + 1 response word
    assert out.hidden.shape == (2, 8, 8)
    assert out.mask[0].tolist() == [True] * 8
    # row 1: no image -> 1 prompt word + 2 response words, then padding
    assert out.mask[1].tolist() == [True] * 3 + [False] * 5
    assert torch.all(out.hidden[1, 3:] == 0)


def test_hashing_encoder_is_deterministic_and_content_sensitive() -> None:
    a = HashingEncoder().encode([_img((1, 2, 3))], ["p"], ["r"])
    b = HashingEncoder().encode([_img((1, 2, 3))], ["p"], ["r"])
    c = HashingEncoder().encode([_img((200, 2, 3))], ["p"], ["r"])
    assert torch.equal(a.hidden, b.hidden)
    assert not torch.equal(a.hidden, c.hidden)
    assert HashingEncoder().encoder_id == HashingEncoder().encoder_id
    assert HashingEncoder().encoder_id != HashingEncoder(HashingEncoderConfig(seed=1)).encoder_id


def test_image_shared_by_m_responses_is_encoded_once() -> None:
    enc = HashingEncoder()
    shared = _img((10, 20, 30))
    m = 5
    enc.encode([shared] * m, ["q"] * m, [f"answer {i}" for i in range(m)])
    assert enc.image_cache.misses == 1
    assert enc.image_cache.hits == m - 1
    # an equal image in a different object has the same digest: still a hit
    enc.encode([_img((10, 20, 30))], ["q"], ["x"])
    assert enc.image_cache.misses == 1
    assert image_digest(shared) != image_digest(_img((10, 20, 31)))


def test_a_reference_is_decoded_only_when_its_sha256_is_not_cached() -> None:
    enc = HashingEncoder()
    image = _img((10, 20, 30))
    ref = image_ref(image)  # PNG: lossless, so the same pixels as the PIL image
    m = 4
    out = enc.encode([ref] * m, ["q"] * m, ["a"] * m)
    assert (enc.image_cache.misses, enc.image_cache.hits) == (1, m - 1)
    assert enc.image_cache.get(ref.sha256) is not None  # keyed by the bytes' sha256
    assert torch.equal(out.hidden, HashingEncoder().encode([image] * m, ["q"] * m,
                                                           ["a"] * m).hidden)
    # Bytes that are no image: decoding them is the sender's error; once their sha256 is
    # cached they are never decoded, so no error.
    junk = ImageRef.of(b"no image here")
    with pytest.raises(PayloadError, match=junk.sha256[:12]):
        enc.encode([junk], ["q"], ["a"])
    enc.image_cache.put(junk.sha256, enc.image_cache.get(ref.sha256))  # type: ignore[arg-type]
    assert torch.equal(enc.encode([junk], ["q"], ["a"]).hidden, out.hidden[:1])


def test_cache_evicts_least_recently_used() -> None:
    cache = ImageFeatureCache(max_items=2)
    cache.put("a", torch.zeros(1))
    cache.put("b", torch.ones(1))
    assert cache.get("a") is not None  # a is now most recent
    cache.put("c", torch.ones(1))
    assert cache.get("b") is None
    assert len(cache) == 2


def test_encode_length_mismatch_is_a_clear_error() -> None:
    with pytest.raises(RouterShapeError, match="differ in length"):
        HashingEncoder().encode([None], ["a", "b"], ["c"])


def test_encoded_batch_validates_shapes() -> None:
    with pytest.raises(RouterShapeError, match="does not match"):
        EncodedBatch(hidden=torch.zeros(2, 3, 4), mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(RouterShapeError, match=r"torch\.bool"):
        EncodedBatch(hidden=torch.zeros(2, 3, 4), mask=torch.ones(2, 3))


def test_concat_batches_pads_with_masked_zeros() -> None:
    a = EncodedBatch(hidden=torch.ones(1, 2, 3), mask=torch.ones(1, 2, dtype=torch.bool))
    b = EncodedBatch(hidden=torch.ones(2, 4, 3), mask=torch.ones(2, 4, dtype=torch.bool))
    out = concat_batches([a, b])
    assert out.hidden.shape == (3, 4, 3)
    assert out.mask[0].tolist() == [True, True, False, False]
    with pytest.raises(RouterShapeError, match="feature size"):
        concat_batches([a, EncodedBatch(torch.ones(1, 2, 5), torch.ones(1, 2, dtype=torch.bool))])
