"""Evaluation of a policy: multiple-choice accuracy (best-of-n sampled and greedy) per category,
in-distribution vs held-out averages, and a judge's win rate on open generation.

Best-of-n rule: a query counts as correct if *any* of ``samples`` responses, drawn with the same
decoding as GRPO (temperature ``temperature``, ``max_new_tokens``), parses strictly to the right
option (:func:`~sdk.alignment.parse_choice`). Greedy: the single argmax decode must parse to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from sdk.alignment._parsing import is_correct
from sdk.alignment._reward_source import ScoreFn
from sdk.data import PreferencePair, Query
from sdk.models import VLMBundle, encode_batch, load_vlm

__all__ = [
    "CategoryScore",
    "EvalSettings",
    "PolicyEvaluation",
    "StyleScore",
    "best_of_n_accuracy",
    "evaluate_policy",
    "generate_responses",
    "style_scores",
]


class EvalSettings(BaseModel):
    """Decoding for evaluation; sampling matches the GRPO rollouts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int = Field(default=3, ge=1, description="n of best-of-n")
    temperature: float = Field(default=1.0, gt=0.0)
    max_new_tokens: int = Field(default=12, ge=1)
    batch_size: int = Field(default=32, ge=1)
    seed: int = 0


@dataclass(frozen=True)
class CategoryScore:
    """Accuracies of one category over ``n`` queries: best-of-n sampled, greedy, and the mean
    accuracy of a single sample (``sampled``: less noisy than best-of-n, and unlike it not
    inflated by a policy that guesses diversely)."""

    best_of_n: float
    greedy: float
    n: int
    sampled: float = float("nan")


@dataclass
class PolicyEvaluation:
    """Per-category scores plus the in-distribution and held-out averages (best-of-n)."""

    categories: dict[str, CategoryScore] = field(default_factory=dict)

    def average(self, names: Sequence[str], *, greedy: bool = False,
                sampled: bool = False) -> float:
        """Unweighted mean of best-of-n (or ``greedy``, or ``sampled``) accuracy over the named
        categories present (NaN when none is)."""
        scores = [
            (c.greedy if greedy else c.sampled if sampled else c.best_of_n)
            for name, c in self.categories.items()
            if name in names
        ]
        return sum(scores) / len(scores) if scores else float("nan")


def best_of_n_accuracy(queries: Sequence[Query], samples: Sequence[Sequence[str]]) -> float:
    """Fraction of queries with at least one strictly correct response; ``samples[j][i]`` is
    sample j for query i."""
    if not queries:
        raise ValueError("best_of_n_accuracy needs at least one query")
    for j, responses in enumerate(samples):
        if len(responses) != len(queries):
            raise ValueError(f"sample {j} has {len(responses)} responses for {len(queries)} queries")
    hits = 0
    for i, q in enumerate(queries):
        if q.answer is None:
            raise ValueError(f"query {q.id!r} has no answer to evaluate against")
        hits += any(is_correct(s[i], q.answer, q.options) for s in samples)
    return hits / len(queries)


def generate_responses(
    bundle: VLMBundle,
    images: Sequence[object],
    prompts: Sequence[str],
    *,
    sample: bool,
    settings: EvalSettings,
) -> list[str]:
    """One decoded response per (image, prompt), batched, left-padded."""
    model: Any = bundle.model  # transformers types generate() loosely
    processor = bundle.processor
    model.eval()
    out: list[str] = []
    for start in range(0, len(prompts), settings.batch_size):
        sl = slice(start, start + settings.batch_size)
        batch = encode_batch(processor, list(images[sl]), list(prompts[sl]),
                             max_length=bundle.max_length, padding_side="left")
        with torch.no_grad():
            generated = model.generate(
                **batch,
                max_new_tokens=settings.max_new_tokens,
                do_sample=sample,
                temperature=settings.temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=processor.tokenizer.pad_token_id,
            )
        new = generated[:, batch["input_ids"].shape[1]:]  # (B, new tokens)
        out.extend(processor.batch_decode(new, skip_special_tokens=True))
    return out


def evaluate_policy(
    policy: str | Path | VLMBundle,
    queries_by_category: Mapping[str, Sequence[Query]],
    settings: EvalSettings | None = None,
) -> PolicyEvaluation:
    """Best-of-n and greedy accuracy per multiple-choice category."""
    s = settings or EvalSettings()
    bundle = policy if isinstance(policy, VLMBundle) else load_vlm(policy)
    torch.manual_seed(s.seed)
    result = PolicyEvaluation()
    for name, queries in queries_by_category.items():
        images = [q.image for q in queries]
        prompts = [q.prompt for q in queries]
        sampled = [
            generate_responses(bundle, images, prompts, sample=True, settings=s)
            for _ in range(s.samples)
        ]
        greedy = generate_responses(bundle, images, prompts, sample=False, settings=s)
        result.categories[name] = CategoryScore(
            best_of_n=best_of_n_accuracy(queries, sampled),
            greedy=best_of_n_accuracy(queries, [greedy]),
            n=len(queries),
            sampled=sum(best_of_n_accuracy(queries, [r]) for r in sampled) / len(sampled),
        )
    return result


@dataclass(frozen=True)
class StyleScore:
    """Open generation under a held-out judge: win rate vs the rejected answer, mean score."""

    win_rate: float
    mean_score: float
    n: int


def style_scores(judge: ScoreFn, pairs: Sequence[PreferencePair],
                 responses: Sequence[str]) -> StyleScore:
    """Judge ``responses[i]`` against ``pairs[i].rejected`` on the same image and prompt.

    A tie counts half a win.
    """
    if len(pairs) != len(responses) or not pairs:
        raise ValueError(f"need one response per pair, got {len(responses)} for {len(pairs)}")
    images = [p.image for p in pairs]
    prompts = [p.prompt for p in pairs]
    ours = [float(x) for x in judge(images, prompts, list(responses))]
    theirs = [float(x) for x in judge(images, prompts, [p.rejected for p in pairs])]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in zip(ours, theirs, strict=True))
    return StyleScore(win_rate=wins / len(pairs), mean_score=sum(ours) / len(ours), n=len(pairs))
