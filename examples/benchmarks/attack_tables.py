"""The paper's Tables 5 and 6, measured against what actually travels, with CIs and baselines.

Gradient inversion (Table 5) runs on REAL router updates (sdk.router ``Router``, ``HashingEncoder``
tokens, ``train_router_locally``) captured in the audit's file format (attacks.capture_round) and
attacked as ``fedmor audit`` does: unprotected (one sample), SecAgg (3 clients x 16 samples, the
library's minimum, 3 local steps; a ``router_secagg`` round in memory: the server sees the mean) and DP
(``clip_and_noise``). A SecAgg round of 3 single-sample clients is refused by default
(``LocalTrainingConfig.min_samples``); its rows lower the minimum to 1. Images go through a small
differentiable patch encoder in front of the same Router (attacks.PatchImageRouter; the update
covers the router only); the realistic images row (3 x 8, the attacker's easier case) runs
``--realistic-steps`` (quick 100; full 8000, also reported at 1000 and 5000).

Membership inference (Table 6) runs the threshold attack on the reward margin of a deliberately
over-fitted small torch reward model (an MLP on random pair features, full-batch Bradley-Terry),
raw scores vs the same scores behind sdk.reward's ``ScoreNormalizer`` ("Norm": clip 1e9) and
with clipping at c = 1.5 and 2.0 ("Norm+Clip"); then the threshold attack and LiRA on the same
recipe trained with record-level DP-SGD (sdk.reward's ``PairDPSGD``) at epsilon 1 and 8, beside
the model's accuracy on its own and on unseen pairs (the price of the defence). ``--real-rm``
(on in full mode) adds the normalization table for a real sdk.reward RewardModel (tiny
Qwen2.5-VL) over-fitted on 32 pairs.

The real-size row (full mode only; ``--only real-size`` runs it alone) audits a
LoRA reward model of a random-init Qwen2-VL-2B in bfloat16 as ``fedmor audit`` does: threshold
and LiRA, its shadows from the target's own base and LoRA recipe (_attacks_real_size).

    .venv/bin/python examples/benchmarks/attack_tables.py --quick
    nice -n 10 .venv/bin/python examples/benchmarks/attack_tables.py --only real-size
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _attacks_real_size import REAL_SIZE_ARCH, real_size_membership
from _attacks_table5 import (
    REALISTIC_IMAGES,
    SINGLES,
    T0,
    log,
    table5_embeddings,
    table5_images,
)
from _scratch import scratch_dir
from torch import Tensor

from attacks import (
    AuditReport,
    MembershipReport,
    MlpMembership,
    mlp_membership,
    normalization_reports,
    overfit_mlp_scores,
    overfit_reward_model_scores,
    protection_summary,
    write_report,
)

MIA_PAIRS = 100  # members (and as many non-members) of the MLP reward model
DP_EPSILONS = (1.0, 8.0)  # record-level DP-SGD targets; the first is the headline's


# ---- Table 6: membership inference on reward scores ----------------------------------------


def table6(raw_pos: Tensor, raw_neg: Tensor, prefix: str = "") -> list[MembershipReport]:
    """The threshold attack on raw, normalized and normalized-clipped margins."""
    out = normalization_reports(raw_pos, raw_neg, prefix=prefix)
    for rep in out:
        lo, hi = rep.auc_ci
        log(f"MIA {rep.setting}: AUC {rep.auc:.3f} [{lo:.3f}, {hi:.3f}] ({rep.verdict})")
    return out


def table6_dp(n_shadow: int, quick: bool) -> list[MlpMembership]:
    """LiRA on the unprotected MLP, then the threshold attack and LiRA on the same recipe
    trained with record-level DP-SGD at each of ``DP_EPSILONS`` (quick: LiRA on the first
    only: a DP training runs for each shadow model too)."""
    from sdk.reward import DPSettings

    runs = [mlp_membership(MIA_PAIRS, setting="unprotected (raw)", n_shadow=n_shadow)]
    for i, eps in enumerate(DP_EPSILONS):
        runs.append(
            mlp_membership(
                MIA_PAIRS,
                setting=f"DP (record-level DP-SGD RM, epsilon {eps:g})",
                dp=DPSettings(target_epsilon=eps),
                n_shadow=n_shadow if i == 0 or not quick else 0,
            )
        )
    for run in runs:
        for rep in run.reports:
            lo, hi = rep.auc_ci
            log(
                f"MIA {rep.setting} ({rep.attack}): AUC {rep.auc:.3f} [{lo:.3f}, {hi:.3f}], "
                f"TPR at FPR 1% {rep.tpr_at_fpr['0.01']:.2f} ({rep.verdict.split(':')[0]})"
            )
        spent = run.target.spent_epsilon
        log(
            f"MIA {run.setting}: epsilon spent {'-' if spent is None else f'{spent:.3f}'}, "
            f"accuracy on own pairs {run.member_accuracy:.2f}, on unseen pairs "
            f"{run.non_member_accuracy:.2f}"
        )
    return runs


def real_size_row(args: argparse.Namespace) -> dict[str, Any]:
    """The real-size membership row, logged as it goes; its figures."""
    log(f"Table 6 at real size: LoRA reward model of a random-init {REAL_SIZE_ARCH}, "
        f"{args.real_size_members} members, {args.real_size_shadows} LiRA shadows")
    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the tables above run on one
    try:
        row = real_size_membership(
            scratch_dir("fedmor-attacks-real-size-", args.real_size_dir),
            size=args.real_size_scale,
            members=args.real_size_members,
            shadows=args.real_size_shadows,
            device=args.device,
            say=log,
        )
    finally:
        torch.set_num_threads(threads)
    for rep in row["reports"]:
        lo, hi = rep["auc_ci"]
        log(f"MIA real size {rep['setting']} ({rep['attack']}): AUC {rep['auc']:.3f} "
            f"[{lo:.3f}, {hi:.3f}], null band {rep['null_band']} "
            f"({rep['verdict'].split(':')[0]})")
    return row


def _real_size_headline(row: dict[str, Any]) -> dict[str, Any]:
    lira = next(r for r in row["reports"] if r["attack"] == "lira")
    return {
        "mia_auc_real_size_lira": lira["auc"],
        "mia_auc_real_size_lira_ci": lira["auc_ci"],
        "mia_real_size_null_band": lira["null_band"],
        "mia_real_size_verdict": lira["verdict"].split(":")[0],
    }


def _headline(steps: int, embeddings: list[dict[str, Any]], images: list[dict[str, Any]],
              mia: list[MembershipReport], dp_runs: list[Any], real_rm: list[MembershipReport],
              real_size: dict[str, Any] | None) -> dict[str, Any]:
    """The benchmark's headline figures, each read from its table's row."""

    def value(rows: list[dict[str, Any]], prefix: str, attack: str = "") -> float:
        """The figure of the first row of this setting and attack at the last step."""
        return float(
            next(
                r["value"]
                for r in rows
                if r["setting"].startswith(prefix)
                and attack in r["attack"]
                and r["step"] in (None, steps)
            )
        )

    clip15 = next(r for r in mia if r.setting == "Norm+Clip 1.5")
    dp_threshold = dp_runs[1].reports[0]
    realistic = [r for r in images if r["setting"].startswith(REALISTIC_IMAGES)][-1]
    default = [r for r in embeddings if r["setting"] == f"{SINGLES}), default"]
    headline = {
        "analytic_cosine_unprotected": value(
            embeddings, "unprotected (1 client, 1 sample, gradient)", "analytic"
        ),
        "inversion_psnr_unprotected": value(images, "unprotected"),
        "inversion_psnr_secagg": realistic["value"],
        "inversion_psnr_secagg_steps": realistic["step"],
        "secagg_single_sample_default": "refused"
        if default and default[0]["verdict"].startswith("refused")
        else "accepted",
        "inversion_psnr_secagg_single_sample_min1_batch_aware": value(
            images, f"{SINGLES}, min_samples lowered to 1), batch"
        ),
        "grey_baseline_psnr": float(images[0]["baselines"]["grey"]["value"]),
        "secagg_best_baseline_psnr_ci_high": max(
            b["ci"][1] for b in realistic["baselines"].values()
        ),
        "mia_auc_unprotected": round(mia[0].auc, 4),
        "mia_auc_norm_clip": round(clip15.auc, 4),
        "mia_auc_norm_clip_ci": [round(clip15.auc_ci[0], 4), round(clip15.auc_ci[1], 4)],
        "mia_auc_dp": round(dp_threshold.auc, 4),
        "mia_auc_dp_ci": [round(dp_threshold.auc_ci[0], 4), round(dp_threshold.auc_ci[1], 4)],
    }
    if real_rm:
        headline["mia_auc_real_rm_unprotected"] = round(real_rm[0].auc, 4)
        headline["mia_auc_real_rm_norm_clip"] = round(real_rm[2].auc, 4)
    if real_size is not None:
        headline.update(_real_size_headline(real_size))
    return headline


def _write_report(out: Path, inversions: list[Any], memberships: list[MembershipReport],
                  words: list[str]) -> None:
    """``report.json`` and ``report.html`` (with the figures) in ``out``, as ``fedmor audit``
    writes them."""
    write_report(
        AuditReport(
            title="fedmor attack benchmark (Tables 5 and 6)",
            reconstructions=inversions,
            memberships=memberships,
            notes=[
                "Gradient inversion on real router updates; membership inference on "
                "an over-fitted small torch reward model, plain and trained with "
                "record-level DP-SGD (and a real RewardModel with --real-rm). Figures at "
                "the last step.",
                *words,
            ],
        ),
        out,
    )
    log(f"wrote {out / 'report.html'}")


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer inversion steps, no real-size row")
    ap.add_argument("--only", choices=("real-size",), help="run this row alone")
    ap.add_argument("--real-size-members", type=int, default=16,
                    help="members (and as many non-members) of the real-size row")
    ap.add_argument("--real-size-shadows", type=int, default=2,
                    help="LiRA shadow models of the real-size row (an even number >= 2)")
    ap.add_argument("--real-size-dir", type=Path,
                    help="work folder of the real-size row, kept (default: temporary)")
    ap.add_argument("--device", default="cpu", help="device of the real-size row")
    ap.add_argument("--real-size-scale", choices=("real", "tiny"), default="real",
                    help="tiny: the same row on the tiny architecture (to test this script)")
    ap.add_argument(
        "--real-rm",
        action="store_true",
        help="also Table 6 on a real sdk.reward RewardModel (on in full mode)",
    )
    ap.add_argument(
        "--realistic-steps", type=int, help="attack steps on the realistic SecAgg images row"
    )
    ap.add_argument("--out", type=Path, help="also write report.json/report.html and PNGs here")
    return ap.parse_args()


def main() -> int:
    args = _args()
    if args.only == "real-size":
        row = real_size_row(args)
        print(json.dumps({"benchmark": "attacks", "only": "real-size", "real_size": row,
                          "headline": _real_size_headline(row),
                          "seconds": round(time.time() - T0, 1)}))
        return 0
    torch.set_num_threads(1)
    steps = 500 if args.quick else 2000
    realistic_steps = args.realistic_steps or (100 if args.quick else 8000)
    rng = np.random.default_rng(0)
    log("Table 5a: analytic and inverting-gradients attacks on captured router updates")
    embeddings = table5_embeddings(steps // 5, rng)
    log(f"Table 5b: inverting-gradients on images through a patch encoder + Router ({steps} steps)")
    images, inversion_reports = table5_images(steps, realistic_steps, rng, args.out)
    log("Table 6: membership inference on reward scores")
    mia = table6(*overfit_mlp_scores(MIA_PAIRS, epochs=300))
    log(f"Table 6, DP: record-level DP-SGD at epsilon {DP_EPSILONS}, threshold and LiRA")
    dp_runs = table6_dp(4 if args.quick else 8, args.quick)
    # The unprotected run's threshold attack repeats Table 6's first row (the same model).
    known = {(r.setting, r.attack) for r in mia}
    mia += [r for run in dp_runs for r in run.reports if (r.setting, r.attack) not in known]
    real_rm: list[MembershipReport] = []
    if args.real_rm or not args.quick:
        log("Table 6 on a real RewardModel (tiny Qwen2.5-VL, 32 pairs, 150 full-batch steps)")
        real_rm = table6(*overfit_reward_model_scores(32, steps=150), prefix="real RM: ")
    real_size = None if args.quick else real_size_row(args)
    words = protection_summary(mia + real_rm, dp_runs)
    for line in words:
        log(line)

    headline = _headline(steps, embeddings, images, mia, dp_runs, real_rm, real_size)
    result = {
        "benchmark": "attacks",
        "quick": args.quick,
        "inversion_steps": steps,
        "mia_reward_model": "small torch MLP reward model, over-fitted on 100 pairs, and the "
        "same recipe with record-level DP-SGD (a real tiny-VLM RewardModel did not reach AUC "
        "0.75: see docs/attacks.md)",
        "table5_embeddings": embeddings,
        "table5_inversion": images,
        "table6_membership": [r.summary_row() for r in mia],
        "table6_membership_dp": [run.summary_row() for run in dp_runs],
        "membership_verdicts": words,
        "secagg_images_by_step": {
            str(r["step"]): {
                k: r[k] for k in ("value", "ci", "ssim", "match_loss", "baselines", "verdict")
            }
            for r in images
            if r["setting"].startswith(REALISTIC_IMAGES)
        },
        "table6_membership_real_rm": [r.summary_row() for r in real_rm],
        "table6_membership_real_size": real_size,
        "headline": headline,
        "seconds": round(time.time() - T0, 1),
    }
    if args.out is not None:
        _write_report(args.out, inversion_reports, mia + real_rm, words)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
