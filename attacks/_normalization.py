"""Membership inference through the score normalization a client applies to every answer.

A client answers ``clip((R - mu) / (sigma + eps), -c, c)`` (sdk.reward ``ScoreNormalizer``).
Without the clip this is the same increasing affine map of every score, so the reward margin
R(x, y+) - R(x, y-) that the threshold attack ranks is only divided by sigma + eps: the ranking,
hence the AUC, is exactly the raw one. The clip caps each score at +-c; it only reorders pairs
where a score reaches the cap (their margins tie at most at 2c), so it trims the tails of the
margin distribution but does not hide which pairs were trained on. :func:`normalization_reports`
measures this on raw scores, as the paper's "Norm" and "Norm+Clip" settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from attacks._errors import AttackInputError
from attacks._membership import PairScorer, threshold_attack
from attacks._report import MembershipReport, membership_report

if TYPE_CHECKING:  # sdk.reward imports transformers: only when a report runs
    from sdk.reward import ScoreNormalizer

__all__ = ["NORMALIZATION_SETTINGS", "normalization_reports"]

# setting name -> the normalizer's clip c (None: raw scores; 1e9: normalized, never clipped).
NORMALIZATION_SETTINGS: Mapping[str, float | None] = {
    "unprotected (raw)": None,
    "Norm": 1e9,
    "Norm+Clip 1.5": 1.5,
    "Norm+Clip 2.0": 2.0,
}
"""Score-release settings the membership benchmark compares: label to clip bound (None: raw scores)."""


def normalization_reports(
    raw_pos: torch.Tensor,
    raw_neg: torch.Tensor,
    *,
    settings: Mapping[str, float | None] = NORMALIZATION_SETTINGS,
    prefix: str = "",
) -> list[MembershipReport]:
    """The threshold attack on the margins of raw rewards (2n,) of the chosen (``raw_pos``) and
    the rejected (``raw_neg``) responses, the first n pairs members, once per setting. mu and
    sigma are fitted on the members' 2n responses, as sdk.reward does after training."""
    from sdk.reward import ScoreNormalizer

    if raw_pos.shape != raw_neg.shape or raw_pos.ndim != 1 or raw_pos.shape[0] % 2:
        raise AttackInputError(
            f"need two (2n,) score vectors, got {tuple(raw_pos.shape)} and {tuple(raw_neg.shape)}"
        )
    n = raw_pos.shape[0] // 2
    train_scores = torch.cat([raw_pos[:n], raw_neg[:n]])
    out = []
    for name, clip in settings.items():
        norm = None if clip is None else ScoreNormalizer.fit(train_scores, clip=clip)
        scorer = _margin_scorer(raw_pos, raw_neg, norm)
        attack = threshold_attack(scorer, list(range(n)), list(range(n, 2 * n)))
        out.append(membership_report(attack, setting=prefix + name))
    return out


def _margin_scorer(
    raw_pos: torch.Tensor, raw_neg: torch.Tensor, norm: ScoreNormalizer | None
) -> PairScorer[int]:
    """The margins a client would answer for pair indices, through ``norm`` when given."""

    def scorer(idx: Sequence[int]) -> np.ndarray:
        i = torch.as_tensor(list(idx))
        p, q = raw_pos[i], raw_neg[i]
        if norm is not None:
            p, q = norm.normalize(p), norm.normalize(q)
        return (p - q).double().numpy()  # (len(idx),)

    return scorer
