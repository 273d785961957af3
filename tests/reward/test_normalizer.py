"""ScoreNormalizer math and the ClientScorer's bound."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from sdk.reward import ClientScorer, RewardModel, ScoreNormalizer


def test_fit_and_normalize() -> None:
    normalizer = ScoreNormalizer.fit([1.0, 3.0, 5.0, 7.0], clip=1.5, eps=0.0 + 1e-9)
    assert normalizer.mu == pytest.approx(4.0)
    assert normalizer.sigma == pytest.approx(5.0**0.5)  # population std of 1, 3, 5, 7
    assert normalizer.n == 4
    out = normalizer.normalize(torch.tensor([4.0, 4.0 + 5.0**0.5, 100.0, -100.0]))
    torch.testing.assert_close(out, torch.tensor([0.0, 1.0, 1.5, -1.5]))


def test_fit_rejects_bad_scores() -> None:
    with pytest.raises(ValueError, match="zero scores"):
        ScoreNormalizer.fit([])
    with pytest.raises(ValueError, match="not finite"):
        ScoreNormalizer.fit([1.0, float("nan")])


def test_constant_scores_do_not_divide_by_zero() -> None:
    normalizer = ScoreNormalizer.fit([2.0, 2.0, 2.0])
    assert normalizer.sigma == 0.0
    out = normalizer.normalize(torch.tensor([2.0, 2.1, 1.9]))
    torch.testing.assert_close(out, torch.tensor([0.0, 3.0, -3.0]))


@given(st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=50),
       st.floats(0.1, 10.0))
def test_normalized_scores_are_bounded(values: list[float], clip: float) -> None:
    normalizer = ScoreNormalizer.fit(values, clip=clip)
    out = normalizer.normalize(torch.tensor(values, dtype=torch.float64))
    assert float(out.abs().max()) <= clip


def test_save_load_round_trip(tmp_path: Path) -> None:
    normalizer = ScoreNormalizer.fit([0.5, -1.0, 2.5], clip=2.0)
    normalizer.save(tmp_path)
    assert ScoreNormalizer.load(tmp_path) == normalizer
    with pytest.raises(FileNotFoundError, match="no score normalizer"):
        ScoreNormalizer.load(tmp_path / "missing")


def test_client_scorer_output_is_normalized_and_clipped(backbones: dict[str, Path]) -> None:
    torch.manual_seed(0)
    model = RewardModel.from_backbone(backbones["qwen2_vl"])
    images = [Image.new("RGB", (84, 84), (i * 40, 0, 0)) for i in range(6)]
    prompts = ["What color?"] * 6
    responses = ["red", "blue", "a green thing", "yellow", "no", "dark red square"]
    raw = model.score(images, prompts, responses)
    # sigma much smaller than the spread: most answers hit the bound.
    tight = ScoreNormalizer(mu=float(raw.mean()), sigma=float(raw.std()) / 50, clip=2.0)
    scores = ClientScorer(model, tight).score(images, prompts, responses)
    assert all(isinstance(s, float) and -2.0 <= s <= 2.0 for s in scores)
    assert max(abs(s) for s in scores) == 2.0
    fitted = ScoreNormalizer.fit(raw)
    scores = ClientScorer(model, fitted).score(images, prompts, responses)
    torch.testing.assert_close(torch.tensor(scores), fitted.normalize(raw), atol=1e-6, rtol=0)
