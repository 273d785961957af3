"""A training run keeps the weights of its best evaluation, not its last step's; early stopping.

The eval set is crafted: the held-out pairs with chosen and rejected swapped. Training learns
the colour task, so accuracy on the swapped pairs falls as training goes on, and the best
evaluation comes before the last step, deterministically (seeded, no clock).
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sdk.reward import (
    RewardModel,
    RewardTrainingConfig,
    ScoreNormalizer,
    pairwise_accuracy,
    train_reward_model,
)
from tests.reward.conftest import ToyPair


def _swapped(pairs: list[ToyPair]) -> list[ToyPair]:
    return [replace(p, chosen=p.rejected, rejected=p.chosen) for p in pairs]


def _model(path: Path) -> RewardModel:
    torch.manual_seed(0)
    return RewardModel.from_backbone(path)


def test_the_checkpoint_is_the_best_evaluation_and_the_normalizer_is_its_own(
    backbones: dict[str, Path], train_pairs: list[ToyPair], eval_pairs: list[ToyPair],
    tmp_path: Path,
) -> None:
    swapped = _swapped(eval_pairs[:24])
    config = RewardTrainingConfig(steps=20, batch_size=16, warmup_steps=3, eval_every=4, seed=0)
    train = train_pairs[:128]
    result = train_reward_model(_model(backbones["qwen2_5_vl"]), train, swapped, config,
                                out_dir=tmp_path, progress=False)
    evals = {int(h["step"]): h["eval_accuracy"] for h in result.history if "eval_accuracy" in h}
    assert sorted(evals) == [4, 8, 12, 16, 20]
    assert result.best_step is not None and result.best_step < 20
    assert result.eval_accuracy == max(evals.values()) == evals[result.best_step]
    assert evals[20] < result.eval_accuracy  # the last step's model is worse: not kept
    stored = json.loads((tmp_path / "reward_config.json").read_text())["training"]
    assert stored["best_step"] == result.best_step
    assert stored["eval_accuracy"] == result.eval_accuracy
    assert stored["last_eval_accuracy"] == evals[20]
    assert stored["steps"] == 20 and not stored["stopped_early"]
    # The saved model is the best step's: reloaded through the user's path, it scores the
    # recorded best accuracy, not the last step's.
    saved = RewardModel.from_pretrained(tmp_path).eval()
    assert pairwise_accuracy(saved, swapped) == result.eval_accuracy
    # Its normalizer was fitted on that model's scores of the training responses.
    scores = saved.score([p.image for p in train] * 2, [p.prompt for p in train] * 2,
                         [p.chosen for p in train] + [p.rejected for p in train])
    refit = ScoreNormalizer.fit(scores)
    normalizer = ScoreNormalizer.load(tmp_path)
    assert normalizer.mu == pytest.approx(refit.mu, abs=1e-5)
    assert normalizer.sigma == pytest.approx(refit.sigma, rel=1e-4)
    # The curve: every step's loss, the evaluations, and its picture.
    with (tmp_path / "curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, 21))
    assert {int(r["step"]): float(r["eval_accuracy"]) for r in rows if r["eval_accuracy"]} \
        == evals
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_patience_stops_after_evaluations_without_a_better_one(
    backbones: dict[str, Path], train_pairs: list[ToyPair], eval_pairs: list[ToyPair],
) -> None:
    swapped = _swapped(eval_pairs[:24])
    config = RewardTrainingConfig(steps=40, batch_size=16, warmup_steps=3, eval_every=4,
                                  patience=2, seed=0, fit_normalizer=False)
    result = train_reward_model(_model(backbones["qwen2_5_vl"]), train_pairs[:128], swapped,
                                config, progress=False)
    assert result.stopped_early and result.steps < 40
    assert result.best_step is not None
    evals = [(int(h["step"]), h["eval_accuracy"]) for h in result.history
             if "eval_accuracy" in h]
    # Stopped at the second evaluation after the best one, none of them better.
    assert evals[-1][0] == result.steps == result.best_step + 2 * 4
    assert all(a <= result.eval_accuracy for _, a in evals)
