"""Long rows go through several forwards (scoring), pair micro-batches or one row's graph at a
time (training): the same rewards and gradients as one forward, with one forward's activations
at a time."""

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
    lengths: list[int] = []
    model.register_forward_pre_hook(lambda _, a: lengths.append(a[0]["input_ids"].shape[1]))
    alone = model.score(*args)
    assert calls[0] == 1 + 5
    # Alone, each row is right-padded to a bucketed length (a few shapes for oneDNN's cache).
    multiple = reward_model.length_bucket(model.encode(*args)["input_ids"].shape[1])
    assert multiple > 1 and all(n % multiple == 0 for n in lengths)
    torch.testing.assert_close(alone, together, rtol=1e-5, atol=1e-5)


def _gradients(model: RewardModel) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def _row_tokens(model: RewardModel, pairs: list[ToyPair]) -> int:
    return int(model.encode([p.image for p in pairs] * 2, [p.prompt for p in pairs] * 2,
                            [p.chosen for p in pairs] + [p.rejected for p in pairs]
                            )["input_ids"].shape[1])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("rows", "forwards"), [(2, 3 * 1), (1, 3 * 3)])
def test_split_backward_gives_the_batch_gradient(
    arch: str, rows: int, forwards: int, backbones: dict[str, Path], train_pairs: list[ToyPair],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rows=2: a pair per forward; rows=1: each row alone, the rejected one twice (once
    # without a graph), so one row's graph is held at a time.
    model = _model(backbones[arch])
    model.train()
    calls = _count_forwards(model)
    pairs = train_pairs[:3]
    loss = _backward_pair_loss(model, pairs)
    whole = _gradients(model)
    assert calls[0] == 1
    tokens = _row_tokens(model, pairs)
    monkeypatch.setattr(reward_model, "ACTIVATION_BUDGET", rows * tokens * model._mlp_width)
    assert model.rows_per_forward(tokens) == rows
    split_loss = _backward_pair_loss(model, pairs)
    split = _gradients(model)
    assert calls[0] == 1 + forwards
    assert split_loss == pytest.approx(loss, rel=1e-5)
    assert whole.keys() == split.keys() and any("lora_" in n for n in whole)
    for name, grad in whole.items():
        torch.testing.assert_close(split[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rows_apart_draw_the_dropout_of_one_graph_per_row(
    backbones: dict[str, Path], train_pairs: list[ToyPair], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With LoRA dropout the rejected row's graph-free forward must see the masks its graphed
    # forward draws, or the chosen row's gradient is taken at another point.
    torch.manual_seed(0)
    model = RewardModel.from_backbone(backbones["qwen2_vl"], lora=LoraSettings(dropout=0.5))
    model.train()
    pair = train_pairs[0]
    monkeypatch.setattr(reward_model, "ACTIVATION_BUDGET", 1)
    torch.manual_seed(1)  # the reference: both rows' graphs at once, a row per forward
    rewards = model.rewards([pair.image] * 2, [pair.prompt] * 2, [pair.chosen, pair.rejected])
    reference_loss = -torch.nn.functional.logsigmoid(rewards[0] - rewards[1])
    reference_loss.backward()
    reference, after_reference = _gradients(model), torch.rand(1)
    torch.manual_seed(1)
    loss = _backward_pair_loss(model, [pair])
    apart, after_apart = _gradients(model), torch.rand(1)
    assert loss == pytest.approx(float(reference_loss.detach()), rel=1e-5)
    for name, grad in reference.items():
        torch.testing.assert_close(apart[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert torch.equal(after_apart, after_reference)  # the same draws consumed
    torch.manual_seed(2)  # and the dropout does act: other masks, another gradient
    _backward_pair_loss(model, [pair])
    assert any(not torch.allclose(g, reference[n]) for n, g in _gradients(model).items())
