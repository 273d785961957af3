"""The demo's style evaluation: held-out judge reward models for the open-generation clients.

A judge is trained like a client's reward model but on pairs synthesized from another seed and
on an architecture the client does not use, so a policy cannot score well merely by pleasing
the very model that rewarded it during GRPO.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk.alignment import EvalSettings
    from sdk.data import PreferencePair
    from sdk.models import Runtime
    from sdk.reward import RewardModel, RewardTrainingConfig

__all__ = ["JUDGE_SEED_OFFSET", "judge_architectures", "style_evaluation", "train_style_judges"]

# Another synthesis seed: the judges never see a pair of the clients' own splits.
JUDGE_SEED_OFFSET = 7919


def judge_architectures(clients: Sequence[str], architectures: Sequence[str],
                        style_clients: Sequence[str]) -> dict[str, str]:
    """Each style client's judge gets the architecture after the client's own in the cycle."""
    own = dict(zip(clients, itertools.cycle(architectures), strict=False))
    return {c: architectures[(architectures.index(own[c]) + 1) % len(architectures)]
            for c in style_clients}


def train_style_judges(architectures: Mapping[str, str], out_dir: Path, *, seed: int,
                       train_pairs: int, config: RewardTrainingConfig,
                       runtime: Runtime | None = None) -> dict[str, RewardModel]:
    """One judge :class:`~sdk.reward.RewardModel` per style client (the keys of
    ``architectures``), trained on separate data, on ``runtime``'s device and dtype."""
    from sdk.data import SynthConfig, synthesize
    from sdk.reward import train_client_reward_models

    clients = tuple(architectures)
    if not clients:
        return {}
    data = out_dir / "data"
    synthesize(SynthConfig(seed=seed + JUDGE_SEED_OFFSET, clients=clients,
                           train_pairs=train_pairs, eval_pairs=32, heldout_pairs=1,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               data)
    trained = train_client_reward_models(data, clients, list(architectures.values()),
                                         out_dir / "models", config=config, progress=False,
                                         runtime=runtime)
    return {c: t.model for c, t in trained.items()}


def style_evaluation(policy: Path, judges: Mapping[str, RewardModel],
                     pairs: Mapping[str, Sequence[PreferencePair]],
                     settings: EvalSettings,
                     runtime: Runtime | None = None) -> dict[str, dict[str, Any]]:
    """Win rate against the rejected answer and mean judge score, per style client.

    Each pair's prompt is answered ``settings.samples`` times with the GRPO rollouts' decoding;
    every answer is judged against that pair's rejected answer; ``mean_score`` is over the
    non-empty answers.
    """
    import torch

    from sdk.alignment import generate_responses, style_scores
    from sdk.models import load_vlm

    bundle = load_vlm(policy, runtime=runtime)
    torch.manual_seed(settings.seed)
    out: dict[str, dict[str, Any]] = {}
    for client, judge in judges.items():
        repeated = [p for p in pairs[client] for _ in range(settings.samples)]
        responses = generate_responses(bundle, [p.image for p in repeated],
                                       [p.prompt for p in repeated], sample=True,
                                       settings=settings)
        # An empty answer loses to the rejected one; the judge (like a client) cannot score it.
        kept = [i for i, r in enumerate(responses) if r.strip()]
        wins, mean = 0.0, float("nan")
        if kept:
            score = style_scores(_score_fn(judge), [repeated[i] for i in kept],
                                 [responses[i] for i in kept])
            wins, mean = score.win_rate * score.n, score.mean_score
        out[client] = {"win_rate": wins / len(repeated), "mean_score": mean, "n": len(repeated),
                       "empty": len(repeated) - len(kept), "example": responses[0]}
    return out


def _score_fn(judge: RewardModel) -> Any:
    """The judge's raw scores as a :data:`~sdk.alignment.ScoreFn`."""
    def score(images: Sequence[Any], prompts: Sequence[str],
              responses: Sequence[str]) -> list[float]:
        return [float(v) for v in judge.score(images, prompts, responses)]
    return score
