"""Membership inference against the MLP reward model, plain or DP-trained, with its utility.

One call trains the target on the first n of 2n random pairs (attacks._mlp_reward), runs the
margin-threshold attack and, with shadow models, LiRA on members vs non-members, and records
what the protection costs: the share of its own training pairs the model orders correctly, and
of unseen pairs. That is the benchmark's evidence that record-level DP-SGD, unlike score
normalization, defends against membership inference on an over-fitted reward model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attacks._membership import LiraConfig, lira_attack, threshold_attack
from attacks._mlp_reward import (
    MlpPairs,
    MlpRewardConfig,
    TrainedMlpReward,
    mlp_shadow_trainer,
    train_mlp_reward,
)
from attacks._report import MembershipReport, membership_report

if TYPE_CHECKING:
    from sdk.reward import DPSettings

__all__ = ["MlpMembership", "mlp_membership", "protection_summary"]


@dataclass(frozen=True)
class MlpMembership:
    """The attacks on one target (threshold first, then LiRA when shadows ran) and its utility."""

    setting: str
    target: TrainedMlpReward
    member_accuracy: float  # own training pairs ordered correctly
    non_member_accuracy: float  # unseen pairs of the same distribution
    reports: list[MembershipReport] = field(default_factory=list)

    @property
    def protected(self) -> bool:
        """True when no attack's AUC is measurably different from a random guess's."""
        return all(r.verdict.startswith("within the null band") for r in self.reports)

    def summary_row(self) -> dict[str, object]:
        """One JSON row: the privacy spent, the utility, and each attack's summary row."""
        return {
            "setting": self.setting,
            "epsilon": None
            if self.target.spent_epsilon is None
            else round(self.target.spent_epsilon, 3),
            "delta": self.target.delta,
            "noise_multiplier": None
            if self.target.noise_multiplier is None
            else round(self.target.noise_multiplier, 3),
            "train_steps": self.target.steps,
            "own_pair_accuracy": round(self.member_accuracy, 4),
            "unseen_pair_accuracy": round(self.non_member_accuracy, 4),
            "protected": self.protected,
            "attacks": [r.summary_row() for r in self.reports],
        }


def mlp_membership(
    n: int,
    *,
    setting: str,
    config: MlpRewardConfig | None = None,
    dp: DPSettings | None = None,
    n_shadow: int = 8,
    pair_seed: int = 0,
    seed: int = 0,
) -> MlpMembership:
    """Train the MLP reward model (with record-level DP-SGD when ``dp`` is given) on n members
    of 2n random pairs (``pair_seed``) and attack it: threshold, then LiRA with ``n_shadow``
    shadows of the same recipe (0: threshold only; LiRA needs at least 2)."""
    cfg = config or MlpRewardConfig()
    pairs = MlpPairs(2 * n, seed=pair_seed)
    members, non_members = list(range(n)), list(range(n, 2 * n))
    target = train_mlp_reward(pairs, members, cfg, dp=dp)
    scorer = target.scorer(pairs)
    attacks = [threshold_attack(scorer, members, non_members, seed=seed)]
    if n_shadow:
        shadows = mlp_shadow_trainer(pairs, cfg, dp=dp)
        lira = LiraConfig(n_shadow=n_shadow, seed=seed)
        attacks.append(lira_attack(scorer, members, non_members, shadows, config=lira))
    return MlpMembership(
        setting=setting,
        target=target,
        member_accuracy=target.accuracy(pairs, members),
        non_member_accuracy=target.accuracy(pairs, non_members),
        reports=[membership_report(a, setting=setting, seed=seed) for a in attacks],
    )


def _figures(reports: Sequence[MembershipReport]) -> str:
    return ", ".join(
        f"{r.attack} AUC {r.auc:.3f} [{r.auc_ci[0]:.3f}, {r.auc_ci[1]:.3f}]" for r in reports
    )


def protection_summary(
    reports: Sequence[MembershipReport], runs: Sequence[MlpMembership] = ()
) -> list[str]:
    """Sentences for a privacy officer: the settings NOT protected against membership inference
    (some attack's AUC interval above the null band), those protected (every attack inside the
    null band: no measurable leak at this sample size), the inconclusive ones, and what each of
    ``runs`` (plain or DP-trained) costs in pairs ordered correctly."""
    by_setting: dict[str, list[MembershipReport]] = {}
    for rep in reports:
        by_setting.setdefault(rep.setting, []).append(rep)
    leaks, safe, unclear = [], [], []
    for setting, reps in by_setting.items():
        line = f"{setting} ({_figures(reps)})"
        if any(r.verdict.startswith("leaks") for r in reps):
            leaks.append(line)
        elif all(r.verdict.startswith("within the null band") for r in reps):
            safe.append(line)
        else:
            unclear.append(line)
    words = [
        "NOT protected against membership inference (an attack's AUC interval lies above the "
        "null band of a random guess): " + ("; ".join(leaks) or "none") + ".",
        "Protected (every attack within the null band of a random guess: no measurable leak): "
        + ("; ".join(safe) or "none")
        + ".",
    ]
    if any(line.startswith("Norm") for line in leaks):
        words[0] += (
            " Normalization and clipping (Norm, Norm+Clip) are NOT a defence against membership "
            "inference on an over-fitted reward model: they are monotone maps of each score, "
            "so the ranking of margins survives them."
        )
    if unclear:
        words.append(
            "Inconclusive (AUC outside the null band, its interval overlapping it): "
            + "; ".join(unclear)
            + "."
        )
    if runs:
        costs = [
            (
                "without DP"
                if run.target.spent_epsilon is None
                else f"DP-SGD epsilon {run.target.spent_epsilon:.2f} (delta {run.target.delta:g})"
            )
            + f" {run.member_accuracy:.2f} / {run.non_member_accuracy:.2f}"
            for run in runs
        ]
        words.append(
            "Utility (share of pairs the reward model orders correctly, its own training "
            "pairs / unseen pairs): " + "; ".join(costs) + "."
        )
    return words
