"""Does the paper's bandit feedback tell a good route from a bad one?

MoR's online router learns from ``r_t = 1`` when the GRPO loss did not rise since the previous
step (DESIGN.md, stage C). A bandit can only learn routes from feedback that depends on them.
This benchmark runs GRPO on ``table1.py``'s task benchmark (same data, warm-up and simulated
clients, cached in the same directory) with a routing whose quality changes from step to step:
at each step a fraction drawn uniformly from [0, 1] of the completions goes to its own task's
client and the rest to a random other client. It then measures, over the steps, the correlation
of the realized right-routed fraction with ``r_t`` and with the loss decrease, each with a 95%
interval (Fisher z), and the mean ``r_t`` of mostly-right and mostly-wrong steps.

    .venv/bin/python examples/benchmarks/bandit_feedback.py --quick
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from _table1_clients import RAW_SCALES, build_clients
from _table1_setup import prepare_task_benchmark
from PIL import Image
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sdk.alignment import (
    CompletionBatch,
    GRPOSettings,
    InProcessRewardSource,
    RewardSelection,
    RewardSource,
    SelectionRewardFunction,
    align,
    loss_feedback,
    routed_scores,
)
from sdk.data import TASK_CLIENTS, Query
from sdk.router import image_digest


def say(message: str) -> None:
    print(message, flush=True)


class MixedRouting(RewardSelection):
    """Per call: a fraction p ~ U(0, 1) of completions to their own client, the rest elsewhere."""

    name = "mixed_routing"

    def __init__(self, answers: dict[str, Query], seed: int) -> None:
        self.answers = answers
        self.rng = random.Random(seed)
        self.right: list[float] = []  # realized right-routed fraction per call

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        p = self.rng.random()
        owners = []
        for image in batch.images:
            assert isinstance(image, Image.Image)  # in process: every task query's own image
            owners.append(TASK_CLIENTS.index(self.answers[image_digest(image)].category))
        arms = [own if self.rng.random() < p
                else self.rng.choice([k for k in range(len(TASK_CLIENTS)) if k != own])
                for own in owners]
        self.right.append(statistics.fmean(a == o for a, o in zip(arms, owners, strict=True)))
        return await routed_scores(batch, arms, source)


class LossLog(TrainerCallback):
    """The logged GRPO loss per step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def correlation(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Pearson r with a 95% Fisher-z interval."""
    r = statistics.correlation(x, y)
    z, se = math.atanh(max(min(r, 0.999999), -0.999999)), 1 / math.sqrt(len(x) - 3)
    return {"r": r, "ci95_low": math.tanh(z - 1.96 * se), "ci95_high": math.tanh(z + 1.96 * se),
            "n": len(x)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None, help="default 60 quick, 300")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fedmor-table1",
                        help="shared with table1.py: its data and warm-up are reused")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as table1.py: one intra-op thread on 2 shared cores
    t0 = time.perf_counter()
    bench = prepare_task_benchmark(args.out, eval_per_category=24 if args.quick else 100,
                                   say=say)
    clients = build_clients(bench.answers, bench.grpo_queries[:60], normalize=True,
                            scales=RAW_SCALES["mixed"])
    selection = MixedRouting(bench.answers, seed=args.seed)
    steps = args.steps or (60 if args.quick else 300)
    settings = GRPOSettings(steps=steps, prompts_per_step=8, num_generations=4,
                            max_completion_length=8, seed=args.seed)
    log = LossLog()
    say(f"GRPO, {steps} steps, each routing a random fraction of completions right ...")
    align(bench.policy, SelectionRewardFunction(selection, InProcessRewardSource(clients)),
          bench.grpo_queries, settings, out_dir=args.out / "bandit-feedback", callbacks=[log])
    if len(log.losses) != len(selection.right):
        raise RuntimeError(f"{len(log.losses)} logged losses for {len(selection.right)} "
                           "reward calls: the step/feedback pairing is off")
    # Step t's loss is computed on the completions routed at step t; r_t compares it with t-1.
    right = selection.right[1:]
    pairs = list(zip(log.losses, log.losses[1:], strict=False))
    feedback = [loss_feedback(prev, cur) or 0.0 for prev, cur in pairs]  # never None here
    r_feedback = correlation(right, feedback)
    r_decrease = correlation(right, [prev - cur for prev, cur in pairs])
    good = [f for f, p in zip(feedback, right, strict=True) if p >= 0.5]
    bad = [f for f, p in zip(feedback, right, strict=True) if p < 0.5]
    say(f"corr(right fraction, r_t) = {r_feedback['r']:.3f} "
        f"[{r_feedback['ci95_low']:.3f}, {r_feedback['ci95_high']:.3f}] over {len(right)} steps; "
        f"mean r_t {statistics.fmean(good):.3f} when >= half routed right, "
        f"{statistics.fmean(bad):.3f} otherwise")
    print(json.dumps({
        "headline": {"feedback_correlation": r_feedback["r"],
                     "feedback_correlation_ci95": [r_feedback["ci95_low"],
                                                   r_feedback["ci95_high"]],
                     "loss_decrease_correlation": r_decrease["r"],
                     "mean_feedback_mostly_right": statistics.fmean(good),
                     "mean_feedback_mostly_wrong": statistics.fmean(bad),
                     "steps": len(right)},
        "feedback_vs_right_fraction": r_feedback, "loss_decrease_vs_right_fraction": r_decrease,
        "grpo": settings.model_dump(), "wall_seconds": round(time.perf_counter() - t0, 1),
    }))


if __name__ == "__main__":
    main()
