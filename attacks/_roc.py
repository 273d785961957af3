"""ROC curves, AUC, bootstrap intervals, TPR at low FPR and the null band of a random attack.

Convention: a higher score means "more likely a member" (label 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict

from attacks._errors import AttackInputError

__all__ = [
    "DEFAULT_FPRS",
    "RocCurve",
    "auc",
    "bootstrap_auc_ci",
    "null_auc_band",
    "roc_curve",
    "tpr_at_fpr",
]

DEFAULT_FPRS: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1)
"""False-positive rates at which a report gives the true-positive rate."""


class RocCurve(BaseModel):
    """An ROC curve: points from (0, 0) to (1, 1), one per distinct threshold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fpr: list[float]
    tpr: list[float]
    thresholds: list[float]

    @property
    def area(self) -> float:
        """Trapezoidal area under the curve (equals :func:`auc` of the same data)."""
        return float(np.trapezoid(self.tpr, self.fpr))


def _check(
    scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise AttackInputError(f"scores {s.shape} and labels {y.shape} differ in length")
    if not np.isin(y, (0, 1)).all():
        raise AttackInputError("labels must be 0 (non-member) or 1 (member)")
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        raise AttackInputError("need at least one member and one non-member")
    if not np.isfinite(s).all():
        raise AttackInputError("scores contain NaN or infinite values")
    return s, y.astype(np.int64)


def roc_curve(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> RocCurve:
    """ROC curve of ``scores`` against 0/1 ``labels``; tied scores form a single point."""
    s, y = _check(scores, labels)
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    # Keep the last index of each run of equal scores: thresholds are the distinct scores.
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tps = np.cumsum(y)[last]
    fps = (last + 1) - tps
    tpr = np.r_[0.0, tps / y.sum()]
    fpr = np.r_[0.0, fps / (y.size - y.sum())]
    # The (0, 0) point's threshold is just above the top score (finite, so JSON-safe).
    thr = np.r_[np.nextafter(s[0], np.inf), s[last]]
    return RocCurve(fpr=fpr.tolist(), tpr=tpr.tolist(), thresholds=thr.tolist())


def _auc_sorted_ranks(s: np.ndarray, y: np.ndarray) -> float:
    # Mann-Whitney U with mid-ranks for ties: P(score_member > score_non) + 0.5 P(equal).
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(s.size, dtype=np.float64)
    sorted_s = s[order]
    # Mid-ranks: average rank over each run of equal values.
    starts = np.r_[0, np.nonzero(np.diff(sorted_s))[0] + 1]
    ends = np.r_[starts[1:], s.size]
    mid = (starts + ends + 1) / 2.0  # 1-based mid-rank of each run
    ranks[order] = np.repeat(mid, ends - starts)
    n_pos = y.sum()
    n_neg = y.size - n_pos
    u = ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney statistic, ties count one half)."""
    s, y = _check(scores, labels)
    return _auc_sorted_ranks(s, y)


def bootstrap_auc_ci(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Seeded percentile-bootstrap interval of the AUC, resampling members and non-members
    separately (stratified) so each replicate keeps the class sizes."""
    s, y = _check(scores, labels)
    if not 0.0 < level < 1.0:
        raise AttackInputError(f"confidence level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    pos, neg = s[y == 1], s[y == 0]
    yb = np.r_[np.ones(pos.size, dtype=np.int64), np.zeros(neg.size, dtype=np.int64)]
    stats = np.empty(n_boot)
    for i in range(n_boot):
        sb = np.r_[rng.choice(pos, pos.size), rng.choice(neg, neg.size)]
        stats[i] = _auc_sorted_ranks(sb, yb)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    point = _auc_sorted_ranks(s, y)
    return min(float(lo), point), max(float(hi), point)


def tpr_at_fpr(curve: RocCurve, fprs: Sequence[float] = DEFAULT_FPRS) -> dict[float, float]:
    """Highest TPR among curve points with FPR <= each target. With fewer than 1/fpr
    non-members the only such point may be FPR = 0, so the figure is conservative."""
    fpr = np.asarray(curve.fpr)
    tpr = np.asarray(curve.tpr)
    return {float(f): float(tpr[fpr <= f + 1e-12].max()) for f in fprs}


def null_auc_band(
    n_members: int, n_non_members: int, *, level: float = 0.95
) -> tuple[float, float]:
    """Central interval of the AUC of a random attack (scores independent of membership) at
    these sample sizes: normal approximation of the Mann-Whitney U null distribution,
    variance (n1 + n0 + 1) / (12 n1 n0)."""
    if n_members < 1 or n_non_members < 1:
        raise AttackInputError("need at least one member and one non-member")
    if not 0.0 < level < 1.0:
        raise AttackInputError(f"confidence level must be in (0, 1), got {level}")
    sd = np.sqrt((n_members + n_non_members + 1) / (12.0 * n_members * n_non_members))
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return max(0.0, 0.5 - z * float(sd)), min(1.0, 0.5 + z * float(sd))
