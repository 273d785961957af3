"""Stage A on a chosen runtime: bfloat16 on the CPU, adapter-only checkpoints, base checks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors import safe_open

from sdk.data import SynthConfig, load_pairs, synthesize
from sdk.models import Runtime, build_tiny_vlm, config_digest
from sdk.reward import ClientScorer, RewardCheckpointError, RewardModel
from sdk.reward._cli import register


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedmor")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_runtime_resolves_auto_to_float32_on_a_cpu_only_machine() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: auto resolves to it")
    assert Runtime().resolve() == (torch.device("cpu"), torch.float32)
    assert Runtime(dtype="bfloat16").resolve().dtype == torch.bfloat16
    assert Runtime(device="cpu", dtype="float16").trainer_precision() == {
        "bf16": False, "fp16": True, "use_cpu": True, "activation_checkpointing": False}
    with pytest.raises(ValueError, match="CUDA is not available"):
        Runtime(device="cuda:0").resolve()
    with pytest.raises(ValueError, match="device"):
        Runtime(device="gpu")


def test_lora_bfloat16_training_saves_adapters_only_and_reloads_over_its_base(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=8, eval_pairs=4,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    split = tmp_path / "data" / "clients" / "detail"
    base = build_tiny_vlm("qwen2_vl", tmp_path / "base", corpus=["What is shown?"])
    ckpt = tmp_path / "ckpt"
    assert _run(["rm", "train", "--data", str(split / "train"), "--backbone", str(base),
                 "--out", str(ckpt), "--steps", "2", "--batch-size", "2", "--lora",
                 "--device", "cpu", "--dtype", "bfloat16", "--gradient-checkpointing"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["dtype"] == "torch.bfloat16" and summary["device"] == "cpu"

    # The checkpoint holds the head and the adapters, a reference to the base, no backbone.
    assert not (ckpt / "backbone").exists()
    with safe_open(str(ckpt / "reward_head.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all(k.startswith("head.") or "lora_" in k for k in keys)
    adapter_bytes = (ckpt / "reward_head.safetensors").stat().st_size
    assert adapter_bytes < 0.1 * (base / "model.safetensors").stat().st_size
    config = json.loads((ckpt / "reward_config.json").read_text())
    assert config["backbone"]["adapter_only"] is True and config["dtype"] == "bfloat16"
    assert config["backbone"]["config_sha256"] == config_digest(base)

    scorer = ClientScorer.from_pretrained(ckpt, runtime=Runtime(device="cpu", dtype="bfloat16"))
    model = scorer._model
    assert next(model.backbone.parameters()).dtype == torch.bfloat16
    pairs = load_pairs(split / "eval")
    raw = model.score([p.image for p in pairs], [p.prompt for p in pairs],
                      [p.chosen for p in pairs])
    assert raw.dtype == torch.float32 and raw.device.type == "cpu" and raw.shape == (len(pairs),)
    assert torch.isfinite(raw).all()
    scores = scorer.score([p.image for p in pairs], [p.prompt for p in pairs],
                          [p.chosen for p in pairs])
    assert all(type(s) is float and abs(s) <= scorer.clip for s in scores)

    # The CLI scores through the same path.
    image = next((split / "eval" / "images").iterdir())
    assert _run(["rm", "score", str(ckpt), "--image", str(image), "--prompt", "Describe it.",
                 "--response", "A red circle.", "--dtype", "bfloat16"]) == 0
    assert abs(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["score"]) <= 3.0

    # Another base (other sizes), or none at all, is refused with a clear error.
    other = build_tiny_vlm("qwen2_vl", tmp_path / "other", size="small")
    with pytest.raises(RewardCheckpointError, match="does not match reward checkpoint"):
        RewardModel.from_pretrained(ckpt, base=other)
    with pytest.raises(RewardCheckpointError, match="holds LoRA adapters only"):
        RewardModel.from_pretrained(ckpt, base=tmp_path / "nowhere")


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "llava_onevision"])
def test_full_fine_tune_saves_the_backbone_and_reloads_exactly(arch: str, tmp_path: Path
                                                               ) -> None:
    base = build_tiny_vlm(arch, tmp_path / "base")
    model = RewardModel.from_backbone(base, runtime=Runtime(device="cpu", dtype="bfloat16"))
    model.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "backbone" / "model.safetensors").is_file()
    loaded = RewardModel.from_pretrained(tmp_path / "ckpt",
                                         runtime=Runtime(device="cpu", dtype="bfloat16"))
    args = ([Image.new("RGB", (84, 84))] * 2, ["What is shown?"] * 2,
            ["A black square.", "Nothing at all."])
    scores = model.score(*args)
    assert scores.dtype == torch.float32 and torch.isfinite(scores).all()
    torch.testing.assert_close(loaded.score(*args), scores, atol=0, rtol=0)


def test_client_settings_carry_the_scorers_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    from client_app import ClientSettings

    monkeypatch.setenv("FEDMOR_CLIENT_DTYPE", "bfloat16")
    settings = ClientSettings(device="cpu")
    assert settings.reward_runtime() == Runtime(device="cpu", dtype="bfloat16")
    with pytest.raises(ValueError, match="device"):
        ClientSettings(device="gpu0")
