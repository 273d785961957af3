"""The tiny-VLM factory, loading through from_pretrained, and input encoding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import sdk.models as models
from sdk.models import (
    ARCHITECTURES,
    VLMInputError,
    encode_batch,
    get_architecture,
    load_vlm,
    to_rgb,
)
from sdk.models._architectures import UnknownArchitectureError, size_with_hidden

ARCHS = sorted(ARCHITECTURES)
# Image tokens one 84x84 image becomes: Qwen 6x6 patches merged 2x2; LLaVA-OneVision 3x3 base
# crop + a 6x6 grid of high-res features + 6 row newlines.
IMAGE_TOKENS = {"qwen2_vl": 9, "qwen2_5_vl": 9, "llava_onevision": 9 + 36 + 6}
EXPECTED_CLASS = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "llava_onevision": "LlavaOnevisionForConditionalGeneration",
}


def _image(color: tuple[int, int, int] = (200, 30, 30)) -> Image.Image:
    return Image.new("RGB", (84, 84), color)




@pytest.mark.parametrize("arch", ARCHS)
def test_checkpoint_round_trip(arch: str, vlm_dirs: dict[str, Path]) -> None:
    path = vlm_dirs[arch]
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == get_architecture(arch).model_type
    assert (path / "model.safetensors").is_file()
    a, b = load_vlm(path), load_vlm(path)
    assert type(a.model).__name__ == EXPECTED_CLASS[arch]
    assert a.architecture == arch
    assert a.hidden_size == 64 and size_with_hidden(a.hidden_size) == "tiny"
    assert a.max_length == 512
    assert sum(p.numel() for p in a.model.parameters()) < 400_000
    batch = encode_batch(a.processor, [_image()], ["What color?"], ["red"], max_length=512)
    with torch.no_grad():
        ha = a.model.model(**batch).last_hidden_state
        hb = b.model.model(**batch).last_hidden_state
    assert ha.shape[-1] == 64
    torch.testing.assert_close(ha, hb, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_tokenizer_special_tokens_and_template(arch: str, vlm_dirs: dict[str, Path]) -> None:
    bundle = load_vlm(vlm_dirs[arch])
    tokenizer = bundle.processor.tokenizer
    spec = get_architecture(arch)
    for token in spec.special_tokens:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, f"{token} is not a single token"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token == "<|im_end|>"
    batch = encode_batch(bundle.processor, [_image()], ["What color?"], ["red"], max_length=512)
    image_id = tokenizer.convert_tokens_to_ids(spec.image_token)
    assert int((batch["input_ids"] == image_id).sum()) == IMAGE_TOKENS[arch]
    text = tokenizer.decode(batch["input_ids"][0])
    assert text.startswith("<|im_start|>user\n")
    assert "<|im_start|>assistant\nred<|im_end|>" in text


@pytest.mark.parametrize("arch", ARCHS)
def test_policy_generation_with_left_padding(arch: str, vlm_dirs: dict[str, Path]) -> None:
    bundle = load_vlm(vlm_dirs[arch])
    batch = encode_batch(
        bundle.processor, [_image(), _image((0, 0, 200))],
        ["short?", "a much longer question about the picture?"],
        max_length=bundle.max_length, padding_side="left",
    )
    assert batch["attention_mask"][:, -1].all()  # left padded: every prompt ends at T-1
    out = bundle.model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, batch["input_ids"].shape[1] + 4)


def test_size_with_hidden_knows_only_the_sizes_built_here(tmp_path: Path) -> None:
    small = load_vlm(models.build_tiny_vlm("qwen2_vl", tmp_path / "small", size="small"))
    assert size_with_hidden(small.hidden_size) == "small"
    assert size_with_hidden(1536) is None  # a real checkpoint's width


def test_unknown_architecture_errors(tmp_path: Path) -> None:
    with pytest.raises(UnknownArchitectureError, match="gpt9"):
        get_architecture("gpt9")
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_vlm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UnknownArchitectureError,
                       match=r"'bert'; supported: \['llava_onevision', 'qwen2_5_vl', 'qwen2_vl'\]"):
        load_vlm(tmp_path)


def test_input_errors(vlm_dirs: dict[str, Path], tmp_path: Path) -> None:
    processor = load_vlm(vlm_dirs["qwen2_vl"]).processor
    with pytest.raises(VLMInputError, match="image 0 is a ndarray"):
        import numpy as np

        encode_batch(processor, [np.zeros((84, 84, 3))], ["q"], ["a"], max_length=512)
    with pytest.raises(VLMInputError, match="response 1 is empty"):
        encode_batch(processor, [_image(), _image()], ["q", "q"], ["a", "  "], max_length=512)
    with pytest.raises(VLMInputError, match="limit of 20 tokens"):
        encode_batch(processor, [_image()], ["q"], ["a"], max_length=20)
    with pytest.raises(VLMInputError, match="batch lengths differ"):
        encode_batch(processor, [_image()], ["q", "r"], ["a"], max_length=512)
    with pytest.raises(VLMInputError, match="empty batch"):
        encode_batch(processor, [], [], [], max_length=512)
    truncated = tmp_path / "broken.png"
    _image().save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:60])
    with pytest.raises(VLMInputError, match="cannot be read as RGB"):
        to_rgb(Image.open(truncated))


def test_to_rgb_converts_other_modes() -> None:
    gray = Image.new("L", (84, 84), 128)
    rgba = Image.new("RGBA", (84, 84), (10, 20, 30, 0))
    assert to_rgb(gray).mode == "RGB"
    assert to_rgb(rgba).getpixel((0, 0)) == (10, 20, 30)
    with pytest.raises(VLMInputError, match="empty"):
        to_rgb(Image.new("RGB", (0, 0)))


@pytest.mark.parametrize(("arch", "published"), [
    ("qwen2_vl", 2.21e9), ("qwen2_5_vl", 3.75e9), ("llava_onevision", 0.89e9)])
def test_real_sizes_have_the_published_parameter_counts(arch: str, published: float) -> None:
    from sdk.models import REAL_SIZES

    spec = get_architecture(arch)
    config = REAL_SIZES[arch].config(spec.build_tokenizer([]))
    with torch.device("meta"):  # shapes only: no memory, no init
        model = spec.model_class(config)
    params = sum(p.numel() for p in model.parameters())
    assert abs(params - published) / published < 0.01
