"""fedmor attacks: membership inference and gradient inversion against what crosses the wire,
with the metrics, trivial baselines and the audit report that make their figures readable.

Each name loads its module (torch, transformers) on first use, so ``fedmor audit --help``
imports neither."""

from typing import TYPE_CHECKING

from sdk import lazy_exports

if TYPE_CHECKING:
    from attacks._audit import AuditConfig, audit_run_dir
    from attacks._baselines import align_to_originals, baseline_guesses
    from attacks._capture import capture_round
    from attacks._capture_audit import MemberTruth, audit_capture_dir
    from attacks._captured_attacks import CapturedAttackConfig, attack_captured_update
    from attacks._errors import AttackError
    from attacks._html import write_report
    from attacks._inversion import (
        CapturedUpdate,
        InversionConfig,
        UpdateKind,
        compute_update,
        invert_update,
    )
    from attacks._metrics import SSIMParams
    from attacks._mlp_membership import MlpMembership, mlp_membership, protection_summary
    from attacks._mlp_reward import overfit_mlp_scores
    from attacks._normalization import normalization_reports
    from attacks._plots import plot_reconstruction_grid
    from attacks._remote import RemoteRewardScorer
    from attacks._report import (
        AuditReport,
        MembershipReport,
        ReconstructionReport,
        reconstruction_report,
    )
    from attacks._testbed import (
        PatchImageRouter,
        overfit_reward_model_scores,
        secure_mean,
        smooth_images,
    )

__all__ = [
    "AttackError",
    "AuditConfig",
    "AuditReport",
    "CapturedAttackConfig",
    "CapturedUpdate",
    "InversionConfig",
    "MemberTruth",
    "MembershipReport",
    "MlpMembership",
    "PatchImageRouter",
    "ReconstructionReport",
    "RemoteRewardScorer",
    "SSIMParams",
    "UpdateKind",
    "align_to_originals",
    "attack_captured_update",
    "audit_capture_dir",
    "audit_run_dir",
    "baseline_guesses",
    "capture_round",
    "compute_update",
    "invert_update",
    "mlp_membership",
    "normalization_reports",
    "overfit_mlp_scores",
    "overfit_reward_model_scores",
    "plot_reconstruction_grid",
    "protection_summary",
    "reconstruction_report",
    "secure_mean",
    "smooth_images",
    "write_report",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
