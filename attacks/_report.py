"""Typed audit results: one model per attack, with its figure, interval, baselines and verdict."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from attacks._baselines import (
    align_to_originals,
    as_batch,
    reconstruction_baselines,
    score_reconstruction,
)
from attacks._lpips import LPIPS_MIN_SIZE, lpips_available, lpips_distance
from attacks._membership import AttackScores
from attacks._metrics import ArrayLike, Layout, MetricSummary, SSIMParams
from attacks._roc import (
    DEFAULT_FPRS,
    RocCurve,
    auc,
    bootstrap_auc_ci,
    null_auc_band,
    roc_curve,
    tpr_at_fpr,
)
from attacks._summary import AuditSummary, summarize

__all__ = [
    "NO_LEAK",
    "AuditReport",
    "CaptureCheck",
    "MembershipReport",
    "ReconstructionReport",
    "membership_report",
    "membership_verdict",
    "reconstruction_report",
    "reconstruction_verdict",
]

NO_LEAK = "within the trivial baselines' confidence interval: no measurable leak"
"""Verdict of a result inside the trivial baselines' confidence interval."""
_NULL = "within the null band of a random attack: no measurable leak"


class ReconstructionReport(BaseModel):
    """A gradient-inversion result beside the trivial baselines scored with the same metrics."""

    model_config = ConfigDict(extra="forbid")

    attack: str
    setting: str
    target: Literal["image", "embedding"]
    step: int | None = None
    metrics: dict[str, MetricSummary]
    baselines: dict[str, dict[str, MetricSummary]]
    ssim_params: SSIMParams | None = None
    lpips: float | None = None
    lpips_status: str = "unavailable: no LPIPS weights file given"
    verdict: str
    figures: list[str] = Field(default_factory=list)
    members: list[str] = Field(default_factory=list, description="whose data; []: every member")
    artefact: str = Field(default="gradient inversion", description="what was attacked")

    @property
    def primary_metric(self) -> str:
        """PSNR for images, cosine for embeddings."""
        return "psnr" if self.target == "image" else "cosine"

    def summary_row(self) -> dict[str, object]:
        """One compact JSON row: the primary metric with its interval, SSIM, each baseline's
        figure and interval, and the verdict (benchmarks print these)."""
        key = self.primary_metric

        def fig(m: MetricSummary) -> dict[str, object]:
            return {"value": round(m.mean, 4), "ci": [round(m.ci_low, 4), round(m.ci_high, 4)]}

        return {
            "setting": self.setting,
            "attack": self.attack,
            "step": self.step,
            "metric": key,
            **fig(self.metrics[key]),
            "ssim": round(self.metrics["ssim"].mean, 4) if "ssim" in self.metrics else None,
            "baselines": {name: fig(b[key]) for name, b in self.baselines.items()},
            "verdict": self.verdict,
        }


class MembershipReport(BaseModel):
    """A membership-inference result with its interval, the null band and the ROC data."""

    model_config = ConfigDict(extra="forbid")

    attack: str
    setting: str
    n_members: int
    n_non_members: int
    auc: float
    auc_ci: tuple[float, float]
    ci_level: float = 0.95
    null_band: tuple[float, float]
    tpr_at_fpr: dict[str, float]
    roc: RocCurve
    verdict: str
    figures: list[str] = Field(default_factory=list)
    members: list[str] = Field(default_factory=list, description="whose data; []: every member")
    artefact: str = Field(default="membership inference", description="what was attacked")

    def summary_row(self) -> dict[str, object]:
        """One compact JSON row: AUC with its interval, the null band, TPR at low FPR, verdict."""
        return {
            "setting": self.setting,
            "attack": self.attack,
            "auc": round(self.auc, 4),
            "auc_ci": [round(c, 4) for c in self.auc_ci],
            "null_band": [round(c, 4) for c in self.null_band],
            "tpr_at_fpr": self.tpr_at_fpr,
            "verdict": self.verdict,
        }


class CaptureCheck(BaseModel):
    """A finding on a captured artefact without a reconstruction to score: what the attacker
    recovered, one statistic beside its trivial baseline, and the verdict."""

    model_config = ConfigDict(extra="forbid")

    attack: str
    setting: str
    statistic: str
    value: float
    baseline: str = Field(description="the trivial baseline of the statistic, in words")
    recovered: str = Field(default="", description="what the attacker holds, in words")
    verdict: str
    members: list[str] = Field(default_factory=list, description="whose data; []: every member")
    artefact: str
    ci: tuple[float, float] | None = Field(default=None, description="95% interval of the "
                                           "statistic when it is estimated from samples; "
                                           "None: computed exactly from the captured bytes")


class AuditReport(BaseModel):
    """Everything an audit found; serialized as report.json, rendered as report.html."""

    model_config = ConfigDict(extra="forbid")

    title: str = "fedmor privacy audit"
    reconstructions: list[ReconstructionReport] = Field(default_factory=list)
    memberships: list[MembershipReport] = Field(default_factory=list)
    checks: list[CaptureCheck] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    figures: list[str] = Field(default_factory=list)
    captured: bool = Field(default=False, description="every row attacks a captured artefact "
                           "(fedmor audit --capture): report.html shows each artefact kind in "
                           "a section of its own, scored rows included")
    summary: AuditSummary = Field(
        default_factory=AuditSummary, description="derived from the rows; recomputed on load"
    )

    @model_validator(mode="after")
    def _summarize(self) -> AuditReport:
        self.summary = self.compute_summary()
        return self

    def compute_summary(self) -> AuditSummary:
        """Per member, the worst verdict of each artefact kind (attacks._summary)."""
        rows: list[MembershipReport | ReconstructionReport | CaptureCheck] = [
            *self.memberships,
            *self.reconstructions,
            *self.checks,
        ]
        return summarize(
            (r.members, r.artefact, f"{r.setting} ({r.attack})", r.verdict) for r in rows
        )


def reconstruction_verdict(
    metric: str, attack: MetricSummary, baselines: dict[str, dict[str, MetricSummary]]
) -> str:
    """Words for a reconstruction figure: a leak only when the attack's mean exceeds the upper
    interval bound of every trivial baseline under the same metric."""
    scored = {name: b[metric] for name, b in baselines.items() if metric in b}
    best_name, best = max(scored.items(), key=lambda kv: kv[1].ci_high)
    unit = " dB" if metric == "psnr" else ""
    detail = f"{metric} {attack.mean:.3g}{unit}; best trivial baseline {best_name} up to {best.ci_high:.3g}{unit}"
    if attack.mean <= best.ci_high:
        return f"{NO_LEAK} ({detail})"
    if "grey" in scored:
        gap = attack.mean - scored["grey"].mean
        return f"leaks: {gap:.1f}{unit} above the grey baseline ({detail})"
    gap = attack.mean - best.mean
    return f"leaks: {metric} {gap:.3g} above the {best_name} baseline ({detail})"


def reconstruction_report(
    originals: ArrayLike,
    reconstructions: ArrayLike,
    pool: ArrayLike,
    *,
    attack: str,
    setting: str,
    best_match: bool = False,
    step: int | None = None,
    layout: Layout = "NCHW",
    ssim_params: SSIMParams | None = None,
    lpips_weights: str | Path | None = None,
    seed: int = 0,
) -> ReconstructionReport:
    """Score ``reconstructions`` against ``originals`` and the baselines built from ``pool``.

    With ``best_match`` the originals are candidates (e.g. every sample behind an aggregate):
    each reconstruction, and each baseline guess alike, is scored against its best match."""
    orig, rec, pl = (as_batch(a, layout) for a in (originals, reconstructions, pool))
    paired = align_to_originals(rec, orig) if best_match else orig
    metrics = score_reconstruction(paired, rec, ssim_params=ssim_params, seed=seed)
    baselines = reconstruction_baselines(
        orig, pl, best_match=best_match, ssim_params=ssim_params, seed=seed
    )
    target: Literal["image", "embedding"] = "image" if "psnr" in metrics else "embedding"
    primary = "psnr" if target == "image" else "cosine"
    lp: float | None = None
    status = "not applicable to embeddings"
    if target == "image":
        lp = lpips_distance(paired, rec, lpips_weights)
        if lp is not None:
            status = "computed (AlexNet LPIPS v0.1, user-provided weights)"
        elif lpips_available(lpips_weights):
            status = f"unavailable: images smaller than {LPIPS_MIN_SIZE} px"
        else:
            status = "unavailable: no usable LPIPS weights file given"
    return ReconstructionReport(
        attack=attack,
        setting=setting,
        target=target,
        step=step,
        metrics=metrics,
        baselines=baselines,
        ssim_params=(ssim_params or SSIMParams()) if target == "image" else None,
        lpips=lp,
        lpips_status=status,
        verdict=reconstruction_verdict(primary, metrics[primary], baselines),
    )


def membership_verdict(auc_value: float, ci: tuple[float, float], band: tuple[float, float]) -> str:
    """Words for an AUC: a leak when its whole interval lies outside the null band (below it
    also counts: flipping the score would then work)."""
    detail = (
        f"AUC {auc_value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]; null band [{band[0]:.3f}, {band[1]:.3f}]"
    )
    if ci[0] > band[1] or ci[1] < band[0]:
        side = "above" if ci[0] > band[1] else "below"
        return f"leaks: AUC interval {side} the null band of a random attack ({detail})"
    if band[0] <= auc_value <= band[1]:
        return f"{_NULL} ({detail})"
    return f"inconclusive: AUC outside the null band but its interval overlaps it ({detail})"


def membership_report(
    scores: AttackScores,
    *,
    setting: str,
    n_boot: int = 1000,
    level: float = 0.95,
    fprs: Sequence[float] = DEFAULT_FPRS,
    seed: int = 0,
) -> MembershipReport:
    """AUC with a stratified bootstrap interval, TPR at low FPRs, ROC data and the null band."""
    s, y = scores.scores, scores.labels
    value = auc(s, y)
    ci = bootstrap_auc_ci(s, y, n_boot=n_boot, level=level, seed=seed)
    n_mem = int(np.sum(y == 1))
    n_non = int(y.size - n_mem)
    band = null_auc_band(n_mem, n_non, level=level)
    curve = roc_curve(s, y)
    return MembershipReport(
        attack=scores.attack,
        setting=setting,
        n_members=n_mem,
        n_non_members=n_non,
        auc=value,
        auc_ci=ci,
        ci_level=level,
        null_band=band,
        tpr_at_fpr={f"{k:g}": v for k, v in tpr_at_fpr(curve, fprs).items()},
        roc=curve,
        verdict=membership_verdict(value, ci, band),
    )
