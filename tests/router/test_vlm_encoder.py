from pathlib import Path

import pytest
import torch
from PIL import Image

from sdk.models import build_tiny_vlm, encode_batch, load_vlm
from sdk.router import Encoder, Router, RouterConfig, VLMEncoder, VLMEncoderConfig
from sdk.router._errors import RouterShapeError

PROMPTS = ["what color is the shape", "which bar is the tallest"]
RESPONSES = ["the shape is red", "the left bar"]


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vlm("qwen2_vl", tmp_path_factory.mktemp("qwen"), corpus=PROMPTS + RESPONSES)


def _encoder(path: Path, **cfg: int) -> VLMEncoder:
    bundle = load_vlm(path)
    return VLMEncoder(
        bundle.model, bundle.processor, config=VLMEncoderConfig(**cfg), max_length=bundle.max_length
    )


def _images() -> list[Image.Image]:
    return [Image.new("RGB", (84, 84), (200, 20, 20)), Image.new("RGB", (84, 84), (20, 20, 200))]


def test_shapes_mask_and_router_on_top(qwen_dir: Path) -> None:
    enc = _encoder(qwen_dir, image_tokens=3, max_text_tokens=8)
    assert isinstance(enc, Encoder)
    out = enc.encode(_images(), PROMPTS, ["red", "the left bar is the tallest of all"])
    assert out.hidden.shape == (2, 11, enc.dim)
    assert bool(out.mask[:, :3].all())  # pooled image tokens
    assert int(out.mask[1].sum()) == 11  # long text fills all 8 text slots
    assert all(not p.requires_grad for p in enc.model.parameters())
    router = Router(RouterConfig(input_dim=enc.dim, num_layers=1), ["a", "b"], enc.encoder_id)
    assert router(out.hidden, out.mask).shape == (2, 2)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "llava_onevision"])
def test_cached_image_features_give_the_same_states_as_pixels(
    arch: str, qwen_dir: Path, tmp_path: Path
) -> None:
    path = qwen_dir if arch == "qwen2_vl" else build_tiny_vlm(arch, tmp_path, corpus=PROMPTS)
    enc = _encoder(path)
    images = _images()
    out = enc.encode(images, PROMPTS, RESPONSES)
    batch = encode_batch(enc.processor, images, PROMPTS, RESPONSES, max_length=512)
    with torch.no_grad():
        ref = enc.model.model(**batch).last_hidden_state  # the plain pixel_values path
    expected = enc._pool(ref, batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(out.hidden, expected.hidden)
    assert torch.equal(out.mask, expected.mask)


def test_image_shared_by_m_responses_goes_through_the_vision_tower_once(qwen_dir: Path) -> None:
    enc = _encoder(qwen_dir)
    m = 4
    shared = _images()[0]
    enc.encode([shared] * m, [PROMPTS[0]] * m, [f"it is red {i}" for i in range(m)])
    assert (enc.image_cache.misses, enc.image_cache.hits) == (1, m - 1)


def test_chunking_and_padding_do_not_change_outputs(qwen_dir: Path) -> None:
    images = _images()
    responses = ["red", "the left bar is clearly the tallest bar"]  # different lengths: padding
    one = _encoder(qwen_dir, batch_size=1).encode(images, PROMPTS, responses)
    two = _encoder(qwen_dir, batch_size=2).encode(images, PROMPTS, responses)
    assert torch.equal(one.mask, two.mask)
    torch.testing.assert_close(one.hidden, two.hidden, atol=1e-4, rtol=1e-4)


def test_encoder_id_fingerprints_weights_and_bad_input(qwen_dir: Path, tmp_path: Path) -> None:
    other = build_tiny_vlm("qwen2_vl", tmp_path / "other", corpus=PROMPTS + RESPONSES, seed=1)
    a, b = _encoder(qwen_dir), _encoder(qwen_dir)
    assert a.encoder_id == b.encoder_id and a.encoder_id.startswith("vlm:qwen2_vl:")
    assert _encoder(other).encoder_id != a.encoder_id
    with pytest.raises(RouterShapeError, match="image 1 is None"):
        a.encode([_images()[0], None], PROMPTS, RESPONSES)
