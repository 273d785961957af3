"""Memory beyond the weights: a frozen vision tower builds no graph; freed host memory leaves."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from sdk.models import ARCHITECTURES, REAL_SIZES, encode_batch, load_vlm, vision_encoder
from sdk.reward import LoraSettings, RewardModel

ARCHS = sorted(ARCHITECTURES)
ROOT = Path(__file__).resolve().parents[2]


def _batch(model: RewardModel, n: int = 2) -> dict[str, torch.Tensor]:
    images = [Image.new("RGB", (84, 84), (30 * i, 90, 160)) for i in range(n)]
    return dict(model.encode(images, ["what is shown?"] * n, ["a square"] * n))


def _grad_mode_inside_tower(model: RewardModel, batch: dict[str, torch.Tensor]) -> list[bool]:
    seen: list[bool] = []
    tower = vision_encoder(model.backbone)
    assert tower is not None
    # Runs after load_vlm's own pre-hook: what the tower's layers see.
    handle = tower.register_forward_pre_hook(lambda *_: seen.append(torch.is_grad_enabled()))
    try:
        model(batch).sum().backward()
    finally:
        handle.remove()
    return seen


@pytest.mark.parametrize("arch", ARCHS)
def test_a_frozen_vision_tower_runs_without_a_graph(arch: str, vlm_dirs: dict[str, Path]) -> None:
    model = RewardModel.from_backbone(vlm_dirs[arch], lora=LoraSettings(r=2))
    model.train()
    batch = _batch(model)
    assert _grad_mode_inside_tower(model, batch) == [False]
    assert torch.is_grad_enabled()  # restored after the tower
    # The language model's adapters still get their gradients.
    assert all(p.grad is not None for n, p in model.named_parameters() if "lora_" in n)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_tower_with_adapters_or_an_input_to_optimise_keeps_its_graph(
        arch: str, vlm_dirs: dict[str, Path]) -> None:
    model = RewardModel.from_backbone(vlm_dirs[arch], lora=LoraSettings(r=2, train_vision=True))
    batch = _batch(model)
    assert _grad_mode_inside_tower(model, batch) == [True]
    tower = vision_encoder(model.backbone)
    assert tower is not None
    assert any(p.grad is not None for n, p in tower.named_parameters() if "lora_" in n)

    frozen = RewardModel.from_backbone(vlm_dirs[arch], lora=LoraSettings(r=2))
    pixels = batch["pixel_values"].clone().requires_grad_(True)  # a gradient-inversion dummy
    frozen({**batch, "pixel_values": pixels}).sum().backward()
    assert pixels.grad is not None and pixels.grad.abs().sum() > 0


def test_scores_are_the_same_with_and_without_the_graph(vlm_dirs: dict[str, Path]) -> None:
    model = RewardModel.from_backbone(vlm_dirs["llava_onevision"], lora=LoraSettings(r=2))
    batch = _batch(model, 3)
    with torch.no_grad():
        reference = model(batch)
    assert torch.equal(model(batch).detach(), reference)


def test_tensors_freed_on_the_cpu_go_back_to_the_os() -> None:
    """Forty 8 MiB tensors, each followed by a small live one, then freed: glibc's default keeps
    them all (its threshold rose to 16 MiB on the first free); after the call they leave."""
    script = (
        "import sys, psutil, torch\n"
        "from sdk.models._memory import return_freed_host_memory\n"
        "if sys.argv[1] == 'on': assert return_freed_host_memory()\n"
        "x = torch.empty(16 << 20, dtype=torch.uint8); x.fill_(1); del x\n"
        "big, small = [], []\n"
        "for _ in range(40):\n"
        "    t = torch.empty(8 << 20, dtype=torch.uint8); t.fill_(1); big.append(t)\n"
        "    small.append(torch.ones(64))\n"
        "before = psutil.Process().memory_info().rss\n"
        "del big\n"
        "print(before - psutil.Process().memory_info().rss)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(ROOT)

    def released(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                              text=True, check=True, env=env, cwd=ROOT)
        return int(done.stdout.strip().splitlines()[-1])

    assert released("off") < 40 << 20  # the default allocator keeps the 320 MiB
    assert released("on") > 300 << 20


def test_load_on_the_cpu_turns_it_on(vlm_dirs: dict[str, Path]) -> None:
    import sdk.models._memory as memory

    load_vlm(vlm_dirs["qwen2_vl"])
    glibc = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
    assert memory._applied == (glibc and "MALLOC_MMAP_THRESHOLD_" not in os.environ)


def test_real_size_llava_onevision_turns_an_84_pixel_image_into_1485_tokens() -> None:
    """Why LLaVA-OneVision's activations dwarf Qwen's at the benchmark's image size: its
    published processor upsamples to a 384-pixel base crop plus one 384-pixel tile (729 tokens
    each, plus 27 row newlines), where Qwen2-VL's min_pixels gives 3x3 merged patches."""
    counts = {}
    for arch in ("qwen2_vl", "llava_onevision"):
        spec = ARCHITECTURES[arch]
        tok = spec.build_tokenizer(["a red square"])
        processor = REAL_SIZES[arch].processor(tok)
        batch = encode_batch(processor, [Image.new("RGB", (84, 84))], ["what?"], ["red"],
                             max_length=32768)
        counts[arch] = int((batch["input_ids"] == tok.convert_tokens_to_ids(spec.image_token))
                           .sum())
    assert counts == {"qwen2_vl": 9, "llava_onevision": 729 + 729 + 27}


def test_llava_onevision_keeps_only_the_vision_layer_its_projector_uses(
    vlm_dirs: dict[str, Path],
) -> None:
    """All SigLIP hidden states of 32 crops would be 1.4 GB at real size while scoring 16
    items; transformers (>= 5) keeps only ``vision_feature_layer``'s. Pinned here, because a
    change back would raise scoring's peak by that much."""
    bundle = load_vlm(vlm_dirs["llava_onevision"])
    batch = encode_batch(bundle.processor, [Image.new("RGB", (84, 84), (200, 30, 30))],
                         ["what?"], ["red"], max_length=bundle.max_length)
    model = bundle.model.model
    with torch.no_grad():
        out = model.get_image_features(pixel_values=batch["pixel_values"],
                                       image_sizes=batch["image_sizes"])
        kept = [h for h in out.hidden_states if h is not None]
        everything = model.vision_tower(batch["pixel_values"][0], output_hidden_states=True)
    assert len(out.hidden_states) == bundle.model.config.vision_config.num_hidden_layers + 1
    assert len(kept) == 1
    torch.testing.assert_close(kept[0], everything.hidden_states[-1], rtol=0, atol=0)
