"""Long rows go through several forwards (scoring) or pair micro-batches (training): the same
rewards and gradients as one forward, with one forward's activations at a time."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import sdk.reward._model as reward_model
from sdk.reward import LoraSettings, RewardModel
from sdk.reward._training import _backward_pair_loss
from tests.reward.conftest import ToyPair

ARCHS = ("llava_onevision", "qwen2_vl")


def _model(path: Path) -> RewardModel:
    torch.manual_seed(0)
    return RewardModel.from_backbone(path, lora=LoraSettings())


def _count_forwards(model: RewardModel) -> list[int]:
    calls = [0]
    model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_tiny_models_score_a_whole_eval_batch_in_one_forward(
    backbones: dict[str, Path], train_pairs: list[ToyPair]
) -> None:
    # So the tiny models' scores and training are what one forward gives (tests and demo).
    model = _model(backbones["llava_onevision"])
    pairs = train_pairs[:4]
    tokens = model.encode([p.image for p in pairs], [p.prompt for p in pairs],
                          [p.chosen for p in pairs])["input_ids"].shape[1]
    assert model.rows_per_forward(tokens) >= 64


@pytest.mark.parametrize("arch", ARCHS)
def test_scores_one_row_at_a_time_equal_one_forward(
    arch: str, backbones: dict[str, Path], train_pairs: list[ToyPair],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model(backbones[arch])
    calls = _count_forwards(model)
    # Different responses, so one forward pads them and a row alone does not.
    pairs = train_pairs[:5]
    args = ([p.image for p in pairs], [p.prompt for p in pairs],
            [p.chosen + " Indeed." * i for i, p in enumerate(pairs)])
    together = model.score(*args)
    assert calls[0] == 1
    monkeypatch.setattr(reward_model, "ACTIVATION_BUDGET", 1)
    alone = model.score(*args)
    assert calls[0] == 1 + 5
    torch.testing.assert_close(alone, together, rtol=1e-5, atol=1e-5)


def _gradients(model: RewardModel) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("arch", ARCHS)
def test_pair_micro_batches_give_the_batch_gradient(
    arch: str, backbones: dict[str, Path], train_pairs: list[ToyPair],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model(backbones[arch])
    model.train()
    calls = _count_forwards(model)
    pairs = train_pairs[:3]
    loss = _backward_pair_loss(model, pairs)
    whole = _gradients(model)
    assert calls[0] == 1
    monkeypatch.setattr(reward_model, "ACTIVATION_BUDGET", 1)
    split_loss = _backward_pair_loss(model, pairs)
    split = _gradients(model)
    assert calls[0] == 1 + 2 * 3  # a pair at a time, a row per forward
    assert split_loss == pytest.approx(loss, rel=1e-5)
    assert whole.keys() == split.keys() and any("lora_" in n for n in whole)
    for name, grad in whole.items():
        torch.testing.assert_close(split[name], grad, rtol=1e-4, atol=1e-6, msg=name)
