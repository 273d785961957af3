"""Table 1's style clients: real reward models for the open-generation clients, and held-out judges.

The task clients of ``table1.py`` are simulated exact judges; an open answer has no exact judge,
so each style client gets the demo's stage-A recipe: a real tiny reward model (its own
architecture) trained on its own preference pairs, answering with normalized, clipped scores.
The evaluation uses another model per style client — the demo's held-out judge, trained on pairs
from another synthesis seed and on another architecture — so a policy does not score well merely
by pleasing the very model that rewarded it. Checkpoints are cached in the run directory.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedmor_local._demo_config import DemoConfig, rm_config
from fedmor_local._demo_judges import style_evaluation, train_style_judges
from sdk.alignment import EvalSettings
from sdk.data import (
    PREFERENCE_CLIENTS,
    PreferencePair,
    Query,
    SynthConfig,
    load_pairs,
    load_queries,
    synthesize,
)
from sdk.reward import (
    ClientScorer,
    RewardModel,
    pairwise_accuracy,
    train_client_reward_models,
)

__all__ = ["STYLE_ARCHITECTURES", "StyleClients", "prepare_style_clients"]

# As in the demo (detail: qwen2_5_vl, safety: llava_onevision); each judge takes the next one.
STYLE_ARCHITECTURES = {"detail": "qwen2_5_vl", "safety": "llava_onevision"}
JUDGE_ARCHITECTURES = {"detail": "llava_onevision", "safety": "qwen2_vl"}
ScoreFn = Callable[[Sequence[Any], Sequence[str], Sequence[str]], list[float]]


@dataclass
class StyleClients:
    """What ``table1.py`` needs of the style clients."""

    names: tuple[str, ...]
    data: Path
    normalized: list[ScoreFn]
    raw: list[ScoreFn]
    queries: list[Query]  # GRPO prompts (open generation, no options)
    eval_pairs: dict[str, list[PreferencePair]]
    judges: dict[str, RewardModel]
    accuracy: dict[str, dict[str, float]]  # client / judge pairwise accuracy on the eval pairs

    def evaluate(self, policy: Path, settings: EvalSettings) -> dict[str, Any]:
        """Judge win rate and mean score per style client, plus their mean win rate."""
        per_client = style_evaluation(policy, self.judges, self.eval_pairs, settings)
        return {"style": {c: {k: v[k] for k in ("win_rate", "mean_score", "empty")}
                          for c, v in per_client.items()},
                "style_win": statistics.fmean(v["win_rate"] for v in per_client.values())}


def _raw_score(model: RewardModel) -> ScoreFn:
    def score(images: Sequence[Any], prompts: Sequence[str],
              responses: Sequence[str]) -> list[float]:
        return [float(v) for v in model.score(images, prompts, responses)]
    return score


def prepare_style_clients(out: Path, *, grpo_queries: int, eval_pairs: int,
                          say: Callable[[str], None]) -> StyleClients:
    """Synthesize the style clients' data, train (or load) their reward models and judges."""
    names = PREFERENCE_CLIENTS
    demo = DemoConfig()  # the demo's stage-A recipe: 600 pairs, 110 steps of 32
    data = out / "style-data"
    if not (data / "manifest.json").is_file():
        synthesize(SynthConfig(clients=names, train_pairs=demo.train_pairs,
                               eval_pairs=eval_pairs, heldout_pairs=1, warmup_queries=0,
                               policy_train_queries=grpo_queries, policy_eval_queries=0), data)
    models = out / "style-models"
    if not all((models / c / "normalizer.json").is_file() for c in names):
        say(f"style clients: training reward models {STYLE_ARCHITECTURES}")
        train_client_reward_models(data, names, [STYLE_ARCHITECTURES[c] for c in names], models,
                                   config=rm_config(demo), progress=False)
    judges_dir = out / "style-judges"
    if all((judges_dir / "models" / c / "normalizer.json").is_file()
           for c in names):
        judges = {c: RewardModel.from_pretrained(judges_dir / "models" / c) for c in names}
    else:
        say(f"style clients: training held-out judges {JUDGE_ARCHITECTURES} on another seed")
        judges = train_style_judges({c: JUDGE_ARCHITECTURES[c] for c in names}, judges_dir,
                                    seed=0, train_pairs=demo.train_pairs, config=rm_config(demo))
    evals = {c: load_pairs(data / "clients" / c / "eval") for c in names}
    raw_models = {c: RewardModel.from_pretrained(models / c) for c in names}
    accuracy = {c: {"client": pairwise_accuracy(raw_models[c], evals[c]),
                    "judge": pairwise_accuracy(judges[c], evals[c])} for c in names}
    say(f"style clients: pairwise accuracy on their eval pairs {accuracy}")
    return StyleClients(
        names=names, data=data,
        normalized=[ClientScorer.from_pretrained(models / c).score for c in names],
        raw=[_raw_score(raw_models[c]) for c in names],
        queries=load_queries(data / "policy" / "train"),
        eval_pairs=evals, judges=judges, accuracy=accuracy)
