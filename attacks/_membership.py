"""Membership inference on reward scores: the margin-threshold attack and a LiRA-style attack.

A scorer is any callable ``score(pairs) -> np.ndarray`` returning the reward margin
R(x, y+) - R(x, y-) of each pair, shape (n,): an in-process reward model, or a client of a live
``/v1/reward`` endpoint (each call then pays that app's query budget). Pairs are opaque to the
attacks, so any pair type works.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from attacks._errors import AttackInputError

__all__ = [
    "AttackScores",
    "LiraConfig",
    "PairScorer",
    "PairT",
    "ShadowTrainer",
    "balance",
    "lira_attack",
    "threshold_attack",
]

PairT = TypeVar("PairT")
PairScorer = Callable[[Sequence[PairT]], np.ndarray]
"""Scores a batch of pairs, one number each: the statistic a membership attack thresholds."""
ShadowTrainer = Callable[[Sequence[PairT]], PairScorer[PairT]]
"""Trains a shadow model on pairs and returns its scorer (LiRA)."""


@dataclass(frozen=True)
class AttackScores:
    """Membership scores (higher = more likely a member) with their true 0/1 labels."""

    attack: str
    scores: np.ndarray  # (n,)
    labels: np.ndarray  # (n,), 1 = member

    def __post_init__(self) -> None:
        if self.scores.shape != self.labels.shape or self.scores.ndim != 1:
            raise AttackInputError(
                f"scores {self.scores.shape} and labels {self.labels.shape} must be equal 1-D"
            )


def balance(
    members: Sequence[PairT], non_members: Sequence[PairT], *, seed: int = 0
) -> tuple[list[PairT], list[PairT]]:
    """Subsample the larger side (seeded) so members and non-members are equally many."""
    n = min(len(members), len(non_members))
    if n == 0:
        raise AttackInputError("need at least one member and one non-member")
    rng = np.random.default_rng(seed)

    def take(items: Sequence[PairT]) -> list[PairT]:
        idx = np.sort(rng.choice(len(items), size=n, replace=False))
        return [items[int(i)] for i in idx]

    return take(members), take(non_members)


def _margins(scorer: PairScorer[PairT], pairs: Sequence[PairT], who: str) -> np.ndarray:
    out = np.asarray(scorer(pairs), dtype=np.float64).reshape(-1)
    if out.shape != (len(pairs),):
        raise AttackInputError(f"{who} returned {out.shape} margins for {len(pairs)} pairs")
    if not np.isfinite(out).all():
        raise AttackInputError(f"{who} returned NaN or infinite margins")
    return out


def threshold_attack(
    scorer: PairScorer[PairT],
    members: Sequence[PairT],
    non_members: Sequence[PairT],
    *,
    seed: int = 0,
) -> AttackScores:
    """The paper's attack: members have larger reward margins, so the margin is the score
    (sweeping its threshold gives the ROC curve)."""
    mem, non = balance(members, non_members, seed=seed)
    pairs = mem + non
    labels = np.r_[np.ones(len(mem), dtype=np.int64), np.zeros(len(non), dtype=np.int64)]
    return AttackScores("threshold", _margins(scorer, pairs, "the target scorer"), labels)


class LiraConfig(BaseModel):
    """Settings of :func:`lira_attack`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_shadow: int = Field(default=8, ge=2)
    # One pooled variance per side is far more stable than per-pair variances with few
    # shadow models (Carlini et al. 2022, section VI).
    fixed_variance: bool = True
    seed: int = 0


def _shadow_masks(n_shadow: int, n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    # Shadows come in complementary couples so every pair is IN exactly n_shadow // 2 times
    # and OUT at least as often: (S, P) booleans.
    masks = []
    for _ in range(n_shadow // 2):
        m = np.zeros(n_pairs, dtype=bool)
        m[rng.permutation(n_pairs)[: n_pairs // 2]] = True
        masks += [m, ~m]
    if n_shadow % 2:
        masks.append(np.zeros(n_pairs, dtype=bool))
    return np.stack(masks)


def _log_normal_pdf(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return np.asarray(-0.5 * ((x - mu) / sd) ** 2 - np.log(sd))


def lira_attack(
    scorer: PairScorer[PairT],
    members: Sequence[PairT],
    non_members: Sequence[PairT],
    train_shadow: ShadowTrainer[PairT],
    *,
    population: Sequence[PairT] = (),
    config: LiraConfig | None = None,
) -> AttackScores:
    """Calibrated per-pair attack in the style of LiRA (online variant).

    The auditor trains ``n_shadow`` shadow reward models with ``train_shadow`` on ``population``
    (data from the same distribution) plus a random half of the candidate pairs, records every
    candidate's margin under each shadow, fits a Gaussian per pair to the margins of shadows
    that did (IN) and did not (OUT) train on it, and scores the target's margin by the log
    likelihood ratio log N(m; mu_in, s_in) - log N(m; mu_out, s_out). The margin is already
    a logit (Bradley-Terry: P(y+ > y-) = sigmoid(margin)), so no extra scaling is applied.
    """
    cfg = config or LiraConfig()
    mem, non = balance(members, non_members, seed=cfg.seed)
    pairs = mem + non
    labels = np.r_[np.ones(len(mem), dtype=np.int64), np.zeros(len(non), dtype=np.int64)]
    rng = np.random.default_rng(cfg.seed)
    masks = _shadow_masks(cfg.n_shadow, len(pairs), rng)  # (S, P)
    shadow_m = np.empty(masks.shape)  # (S, P)
    for s, mask in enumerate(masks):
        train = list(population) + [p for p, keep in zip(pairs, mask, strict=True) if keep]
        shadow = train_shadow(train)
        shadow_m[s] = _margins(shadow, pairs, f"shadow model {s}")
    target = _margins(scorer, pairs, "the target scorer")

    n_in = masks.sum(0)  # (P,)
    n_out = (~masks).sum(0)
    mu_in = (shadow_m * masks).sum(0) / n_in
    mu_out = (shadow_m * ~masks).sum(0) / n_out
    res_in = (shadow_m - mu_in) * masks
    res_out = (shadow_m - mu_out) * ~masks
    floor = 1e-6
    if cfg.fixed_variance:
        sd_in = np.full(len(pairs), np.sqrt((res_in**2).sum() / max(masks.sum() - 1, 1)))
        sd_out = np.full(len(pairs), np.sqrt((res_out**2).sum() / max((~masks).sum() - 1, 1)))
    else:
        sd_in = np.sqrt((res_in**2).sum(0) / np.maximum(n_in - 1, 1))
        sd_out = np.sqrt((res_out**2).sum(0) / np.maximum(n_out - 1, 1))
    sd_in, sd_out = np.maximum(sd_in, floor), np.maximum(sd_out, floor)
    score = _log_normal_pdf(target, mu_in, sd_in) - _log_normal_pdf(target, mu_out, sd_out)
    return AttackScores("lira", score, labels)
