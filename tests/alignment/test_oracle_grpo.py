"""GRPO with an exact judge must raise the policy's accuracy on the prompts it trains on.

The sanity check that would have caught a broken advantage sign, a log-prob over the wrong tokens
(prompt, padding, after EOS) or images missing from the loss's forward pass. The policy first
learns the answer format with partial ability (half its warm-up labels right, half random),
then GRPO with a reward of 1 for the right option must make its answers depend on the picture.
Measured noise-free with :func:`option_probabilities` rather than by sampling.
"""

import random
from pathlib import Path

import torch
from PIL import Image

from sdk.alignment import (
    GRPOSettings,
    InProcessRewardSource,
    SelectionRewardFunction,
    WarmupConfig,
    align,
    make_selection,
    warmup_policy,
)
from sdk.alignment._evaluation import option_probabilities
from sdk.alignment._parsing import is_correct
from sdk.data import Query
from sdk.models import build_tiny_vlm, load_vlm
from sdk.router import image_digest

OPTIONS = ("A. red", "B. green", "C. blue", "D. yellow")
PROMPT = "What color is the picture? Options: A. red B. green C. blue D. yellow. Answer with one option."
RGB = {"A. red": (220, 30, 30), "C. blue": (30, 30, 220)}


def _query(rng: random.Random, i: int, colour: str, label: str) -> Query:
    r, g, b = RGB[colour]
    jitter = rng.randint(-20, 20)  # distinct images, same colour
    image = Image.new("RGB", (32, 32), (r + jitter, g, b - jitter))
    return Query(id=f"q{i}", image=image, prompt=PROMPT, category="color", answer=label,
                 options=OPTIONS)


def _right_minus_wrong_colour(policy: Path, queries: list[Query]) -> tuple[float, float]:
    """Mean P(right option) and mean P(right) - P(the other colour's option)."""
    probs = option_probabilities(load_vlm(policy), queries)  # (n, 4)
    right = [OPTIONS.index(str(q.answer)) for q in queries]
    other = [OPTIONS.index("C. blue" if q.answer == "A. red" else "A. red") for q in queries]
    rows = torch.arange(len(queries))
    p_right, p_other = probs[rows, right], probs[rows, other]
    return float(p_right.mean()), float((p_right - p_other).mean())


def test_grpo_with_an_exact_judge_raises_accuracy(tmp_path: Path) -> None:
    rng = random.Random(0)
    colours = list(RGB)
    # Partial ability, as the paper's base: half the warm-up labels right, half random.
    warm = [_query(rng, i, c, c if i % 2 else rng.choice(OPTIONS))
            for i, c in enumerate(rng.choice(colours) for _ in range(64))]
    train = [_query(rng, 100 + i, colours[i % 2], colours[i % 2]) for i in range(16)]
    base = build_tiny_vlm("qwen2_5_vl", tmp_path / "base", corpus=[PROMPT, *OPTIONS])
    policy = warmup_policy(base, warm, tmp_path / "cache",
                           WarmupConfig(steps=60, batch_size=16, learning_rate=3e-3))
    answers = {image_digest(q.image): q for q in train}

    def judge(images: list[Image.Image | None], prompts: list[str],
              responses: list[str]) -> list[float]:
        return [float(is_correct(r, str(answers[image_digest(i)].answer), OPTIONS))
                for i, r in zip(images, responses, strict=True)]

    before, gap_before = _right_minus_wrong_colour(policy, train)
    fn = SelectionRewardFunction(make_selection("best_single", client=0),
                                 InProcessRewardSource([judge]))
    settings = GRPOSettings(steps=30, prompts_per_step=4, max_completion_length=6,
                            learning_rate=1e-3)  # measured at 1e-3; the default is slower
    out = align(policy, fn, train, settings,
                out_dir=tmp_path / "grpo", progress=None)
    after, gap_after = _right_minus_wrong_colour(out / "policy", train)
    # Measured: P(right) 0.35 -> 0.75, gap 0.34 -> 0.75 (30 steps, lr 1e-3). A flipped advantage
    # lowers both; a loss whose forward pass misses the images cannot widen the gap.
    assert after > before + 0.1
    # The answers depend on the picture more: the right colour gains over the wrong one.
    assert gap_after > gap_before + 0.1
