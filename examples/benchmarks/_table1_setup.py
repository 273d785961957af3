"""The task benchmark behind ``table1.py``: synthesized data, GRPO queries and the warmed-up policy.

Everything is cached under the output directory, so benchmarks sharing it reuse one warm-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sdk.alignment import WarmupConfig, warmup_policy
from sdk.data import HELDOUT_CATEGORIES, TASK_CLIENTS, Query, SynthConfig, load_queries, synthesize
from sdk.models import build_tiny_vlm
from sdk.router import image_digest

__all__ = ["TaskBenchmark", "prepare_task_benchmark"]

# At most 1600 steps (the format needs many), stopped once the task categories' validation
# P(right) averages 0.72, a base with partial ability: without the target how far the same
# recipe gets differs by machine, and a base that already answers right leaves GRPO nothing to
# teach.
WARMUP = WarmupConfig(steps=1600, batch_size=16, stop_at_expected=0.72, check_every=50)
# GRPO-data queries per task category held back to decide the warm-up's stop (never trained on).
WARMUP_VALIDATION = 32
# Warm-up queries per category: enough that 1600 steps make under two passes over them, so the
# warm-up learns the categories rather than fitting the images (many passes over a few hundred
# per category left the harder ones at chance).
WARMUP_QUERIES = 1600


@dataclass
class TaskBenchmark:
    """The task clients' data, GRPO queries (answers by image digest) and the base policy."""

    data: Path
    policy: Path
    grpo_queries: list[Query]
    answers: dict[str, Query]
    eval_sets: dict[str, list[Query]]


def prepare_task_benchmark(out: Path, *, eval_per_category: int, say: Callable[[str], None],
                           warmup: WarmupConfig = WARMUP) -> TaskBenchmark:
    """Synthesize (or reuse) the benchmark in ``out`` and warm the base policy up (cached)."""
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    # 300 pairs per client: with 64 the router sent 32% of completions to the wrong client
    # (router.py reaches 100% with 300), and a wrong client's consistent out-of-domain
    # preferences pulled every category below the base.
    synth = SynthConfig(clients=TASK_CLIENTS, train_pairs=300, eval_pairs=8, heldout_pairs=8,
                        warmup_queries=WARMUP_QUERIES, policy_train_queries=8,
                        policy_eval_queries=eval_per_category)
    if not (data / "manifest.json").is_file():
        say("synthesizing the benchmark ...")
        synthesize(synth, data)
    grpo_data = out / "grpo-data"  # another seed: answered queries the policy never saw
    if not (grpo_data / "manifest.json").is_file():
        synthesize(synth.model_copy(update={"seed": 1000, "warmup_queries": 400}), grpo_data)
    warm_queries = load_queries(data / "policy" / "warmup")
    grpo_split = [q for q in load_queries(grpo_data / "policy" / "warmup")
                  if q.category in TASK_CLIENTS]
    validation = {c: [q for q in grpo_split if q.category == c][-WARMUP_VALIDATION:]
                  for c in TASK_CLIENTS}
    held_back = {q.id for qs in validation.values() for q in qs}
    grpo_queries = [q for q in grpo_split if q.id not in held_back]
    eval_sets = {c: load_queries(data / "policy" / "eval" / c)
                 for c in (*TASK_CLIENTS, *HELDOUT_CATEGORIES)}
    say(f"{len(warm_queries)} warm-up, {len(grpo_queries)} GRPO queries, "
        f"{sum(map(len, eval_sets.values()))} eval queries")
    base = out / "base"
    if not (base / "config.json").is_file():
        corpus = [q.prompt for q in warm_queries] + [str(q.answer) for q in warm_queries]
        build_tiny_vlm("qwen2_5_vl", base, corpus=corpus)
    say("supervised warm-up (cached) ...")
    policy = warmup_policy(base, warm_queries, out / "cache", warmup, validation=validation,
                           progress=say)
    return TaskBenchmark(data=data, policy=policy, grpo_queries=grpo_queries,
                         answers={image_digest(q.image): q for q in grpo_queries},
                         eval_sets=eval_sets)
