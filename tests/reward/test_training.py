"""Bradley-Terry training: learning, determinism, LoRA, DP-SGD, checkpoints."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from sdk.reward import (
    ClientScorer,
    DPSettings,
    LoraSettings,
    RewardModel,
    RewardTrainingConfig,
    pairwise_accuracy,
    train_reward_model,
)
from sdk.reward._training import bradley_terry_loss
from tests.reward.conftest import ToyPair


def _model(path: Path, lora: LoraSettings | None = None) -> RewardModel:
    torch.manual_seed(0)
    return RewardModel.from_backbone(path, lora=lora)


def test_bradley_terry_loss_values() -> None:
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    expected = (-math.log(1 / (1 + math.exp(-2.0))) + math.log(2.0)) / 2
    assert float(bradley_terry_loss(chosen, rejected)) == pytest_approx(expected)


def pytest_approx(value: float) -> object:
    import pytest

    return pytest.approx(value, rel=1e-6)


def test_training_learns_a_toy_task_and_checkpoints(
    backbones: dict[str, Path], train_pairs: list[ToyPair], eval_pairs: list[ToyPair],
    tmp_path: Path,
) -> None:
    model = _model(backbones["qwen2_vl"])
    before = pairwise_accuracy(model, eval_pairs)
    config = RewardTrainingConfig(steps=30, batch_size=16, warmup_steps=5, eval_every=15)
    result = train_reward_model(model, train_pairs, eval_pairs, config, out_dir=tmp_path,
                                progress=False)
    assert result.eval_accuracy is not None
    assert result.eval_accuracy >= 0.8 > before + 0.2
    assert result.eval_accuracy == pairwise_accuracy(model, eval_pairs)
    assert [h["step"] for h in result.history] == list(range(1, 31))
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert {h.get("eval_accuracy") is not None for h in result.history[14::15]} == {True}
    # Checkpoint: weights, JSON config with the training record, normalizer.
    stored = json.loads((tmp_path / "reward_config.json").read_text())
    assert stored["training"]["steps"] == 30
    assert stored["training"]["eval_accuracy"] == result.eval_accuracy
    assert (tmp_path / "normalizer.json").is_file()
    scorer = ClientScorer.from_pretrained(tmp_path)
    pairs = eval_pairs[:16]
    images, prompts = [p.image for p in pairs], [p.prompt for p in pairs]
    good = scorer.score(images, prompts, [p.chosen for p in pairs])
    bad = scorer.score(images, prompts, [p.rejected for p in pairs])
    assert all(abs(s) <= scorer.clip for s in good + bad)
    assert sum(g > b for g, b in zip(good, bad, strict=True)) >= 12


def test_training_is_deterministic(backbones: dict[str, Path], train_pairs: list[ToyPair]
                                   ) -> None:
    config = RewardTrainingConfig(steps=3, batch_size=8, seed=7, fit_normalizer=False)
    runs = [train_reward_model(_model(backbones["qwen2_5_vl"]), train_pairs, [], config,
                               progress=False).history for _ in range(2)]
    assert [h["loss"] for h in runs[0]] == [h["loss"] for h in runs[1]]


def test_lora_trains_only_adapters_and_head(
    backbones: dict[str, Path], train_pairs: list[ToyPair]
) -> None:
    model = _model(backbones["llava_onevision"], lora=LoraSettings(r=4))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable
    assert all("lora_" in n or n.startswith("head.") for n in trainable)
    assert all("language_model" in n for n in trainable if "lora_" in n)
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters()
                     if not p.requires_grad}
    lora_b_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    config = RewardTrainingConfig(steps=3, batch_size=8, warmup_steps=0, lr=1e-2,
                                  fit_normalizer=False, lora=LoraSettings(r=4))
    train_reward_model(model, train_pairs, [], config, progress=False)
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], v) for n, v in frozen_before.items())
    assert any(not torch.equal(params[n], v) for n, v in lora_b_before.items())


def test_lora_checkpoint_round_trip(backbones: dict[str, Path], train_pairs: list[ToyPair],
                                    tmp_path: Path) -> None:
    model = _model(backbones["qwen2_vl"], lora=LoraSettings(r=2))
    config = RewardTrainingConfig(steps=2, batch_size=4, warmup_steps=0, fit_normalizer=False)
    train_reward_model(model, train_pairs, [], config, out_dir=tmp_path, progress=False)
    loaded = RewardModel.from_pretrained(tmp_path)
    assert loaded.lora == LoraSettings(r=2)
    pairs = train_pairs[:4]
    args = ([p.image for p in pairs], [p.prompt for p in pairs], [p.chosen for p in pairs])
    torch.testing.assert_close(loaded.score(*args), model.score(*args), atol=0, rtol=0)


def test_dp_reports_spent_epsilon_within_target(
    backbones: dict[str, Path], train_pairs: list[ToyPair]
) -> None:
    model = _model(backbones["qwen2_vl"], lora=LoraSettings(r=2))
    dp = DPSettings(target_epsilon=4.0, delta=1e-5, max_grad_norm=0.5)
    config = RewardTrainingConfig(steps=3, batch_size=6, warmup_steps=0, dp=dp,
                                  fit_normalizer=False, lora=LoraSettings(r=2))
    head_before = model.head.weight.detach().clone()
    result = train_reward_model(model, train_pairs[:64], [], config, progress=False)
    assert result.spent_epsilon is not None and result.noise_multiplier is not None
    assert 0.0 < result.spent_epsilon <= 4.0
    assert math.isfinite(result.spent_epsilon)
    assert result.noise_multiplier > 0.5
    assert not torch.equal(model.head.weight, head_before)


def test_a_config_lora_other_than_the_models_is_refused(
    backbones: dict[str, Path], train_pairs: list[ToyPair]
) -> None:
    config = RewardTrainingConfig(steps=1, batch_size=2, fit_normalizer=False,
                                  lora=LoraSettings(r=2))
    for model in (_model(backbones["qwen2_vl"]),
                  _model(backbones["qwen2_vl"], lora=LoraSettings(r=4))):
        with pytest.raises(ValueError, match="was built with lora="):
            train_reward_model(model, train_pairs, [], config, progress=False)
