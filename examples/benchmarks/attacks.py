# ruff: noqa: E402  (the sys.path fix below must run before the imports)
"""The paper's Tables 5 and 6, measured against what actually travels, with CIs and baselines.

Gradient inversion (Table 5) runs on REAL router updates (sdk.router ``Router``, ``HashingEncoder``
tokens, ``train_router_locally``) captured in the audit's file format (attacks.capture_round) and
attacked as ``fedmor audit`` does: unprotected (one sample), SecAgg (3 clients x 16 samples, the
library's minimum, 3 local steps; sdk.secagg ``simulate_round``: the server sees the mean) and DP
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

    .venv/bin/python examples/benchmarks/attacks.py --quick
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named attacks.py: put the repository root first on the path so that
# ``import attacks`` finds the package, not this script.
_ROOT = str(Path(__file__).resolve().parents[2])
sys.path[:] = [_ROOT] + [
    p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent
]

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from attacks import (
    AuditReport,
    CapturedAttackConfig,
    CapturedUpdate,
    InversionConfig,
    MembershipReport,
    MlpMembership,
    PatchImageRouter,
    ReconstructionReport,
    UpdateKind,
    align_to_originals,
    attack_captured_update,
    baseline_guesses,
    capture_round,
    compute_update,
    invert_update,
    mlp_membership,
    normalization_reports,
    overfit_mlp_scores,
    overfit_reward_model_scores,
    plot_reconstruction_grid,
    protection_summary,
    reconstruction_report,
    secure_mean,
    smooth_images,
    write_report,
)
from sdk.router import (
    EncodedBatch,
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    Router,
    RouterConfig,
    RouterError,
)
from sdk.secagg import DPConfig, clip_and_noise

CLIENTS = ["a", "b", "c"]
T0 = time.time()
DP = DPConfig(clip_norm=1.0, noise_multiplier=1.0)
REALISTIC = "SecAgg (3 clients x 16 samples, 3 local steps)"
REALISTIC_IMAGES = "SecAgg (3 clients x 8 images, 3 local steps)"
SINGLES = "SecAgg (3 clients x 1 sample"
MIA_PAIRS = 100  # members (and as many non-members) of the MLP reward model
DP_EPSILONS = (1.0, 8.0)  # record-level DP-SGD targets; the first is the headline's


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def bce(logits: Tensor, target: Tensor) -> Tensor:
    """fedmor's router loss: BCE of the K logits against the client's one-hot."""
    return nn.functional.binary_cross_entropy_with_logits(logits, target)


def make_router(dim: int) -> Router:
    cfg = RouterConfig(input_dim=dim, d_model=32, num_layers=2, num_heads=4, dim_feedforward=64)
    return Router(cfg, CLIENTS, "bench")


def one_hot(k: int, n: int = 1) -> Tensor:
    return nn.functional.one_hot(torch.full((n,), k), len(CLIENTS)).float()  # (n, K)


# ---- Table 5a: embeddings, attacked as `fedmor audit` attacks a captured update ------------


def encoded_samples(n: int, seed: int) -> EncodedBatch:
    """HashingEncoder tokens (n, T, D) of random images, prompts and responses."""
    rng = np.random.default_rng(seed)
    enc = HashingEncoder(HashingEncoderConfig(dim=32))
    words = ["red", "blue", "green", "yellow", "square", "circle", "left", "right", "tall", "the"]
    images = [Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)) for _ in range(n)]
    prompts = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    responses = [" ".join(rng.choice(words, int(rng.integers(2, 8)))) for _ in range(n)]
    return enc.encode(images, prompts, responses)


def table5_embeddings(steps: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    data = encoded_samples(3 + 48 + 64, seed=0)

    def rows_of(a: int, b: int) -> EncodedBatch:
        return EncodedBatch(hidden=data.hidden[a:b], mask=data.mask[a:b])

    pool = rows_of(51, 115)
    router = make_router(32)
    local = LocalTrainingConfig(epochs=3, batch_size=16, lr=1e-3)  # 16 samples: 3 AdamW steps
    lowered = local.model_copy(update={"min_samples": 1})  # the deliberately unprotected client
    single = rows_of(0, 1)
    singles = [rows_of(k, k + 1) for k in range(3)]
    rows: list[dict[str, Any]] = []
    try:  # the library's default: each client refuses to train on fewer than 16 samples
        captures = {f"{SINGLES}), default": capture_round(
            router, singles, [0, 1, 2], setting="aggregate", local=local, pool=pool
        )}
    except RouterError as err:
        captures = {}
        rows.append({"setting": f"{SINGLES}), default", "attack": "library", "value": None,
                     "step": None, "verdict": f"refused: {err}"})
        log(f"{SINGLES}), default LocalTrainingConfig: refused ({err})")
    captures |= {
        "unprotected (1 client, 1 sample, gradient)": capture_round(
            router, [single], [0], setting="plaintext", update="gradient", pool=pool
        ),
        "unprotected (1 client, 1 sample, train_router_locally, min_samples=1)": capture_round(
            router, [single], [0], setting="plaintext", local=lowered, pool=pool
        ),
        f"{SINGLES}, min_samples=1)": capture_round(
            router, singles, [0, 1, 2], setting="aggregate", local=lowered, pool=pool
        ),
        REALISTIC: capture_round(
            router,
            [rows_of(3 + 16 * k, 19 + 16 * k) for k in range(3)],
            [0, 1, 2],
            setting="aggregate",
            local=local,
            pool=pool,
            seed=int(rng.integers(2**31)),
        ),
    }
    captures["DP (C=1, z=1, 1 client, 1 sample)"] = capture_round(
        router, [single], [0], setting="plaintext", update="gradient", pool=pool, dp=DP
    )
    cfg = CapturedAttackConfig(steps=steps)
    for setting, captured in captures.items():
        for rep in attack_captured_update(captured, name=setting, config=cfg):
            rows.append(rep.summary_row())
            log(f"{rep.attack} {setting}: cosine {rows[-1]['value']} ({rep.verdict})")
    return rows


# ---- Table 5b: optimization attack on images through a differentiable encoder --------------


def table5_images(
    steps: int, realistic_steps: int, rng: np.random.Generator, out: Path | None
) -> tuple[list[dict[str, Any]], list[ReconstructionReport]]:
    """Inverting gradients per setting; the final-step reports (and, with ``out``, a grid of
    the reconstructions beside the originals and the baselines)."""
    model = PatchImageRouter(make_router(32), 32)
    names = [n for n, p in model.named_parameters() if p.requires_grad]  # the router only
    images, pool = smooth_images(27, seed=0), smooth_images(64, seed=5)
    checkpoints = tuple(sorted({max(steps // 4, 1), steps}))
    rows: list[dict[str, Any]] = []
    reports: list[ReconstructionReport] = []
    finals: dict[str, Tensor] = {}

    def attack(
        upd: CapturedUpdate,
        labels: Tensor,
        orig: Tensor,
        setting: str,
        sizes: list[int] | None,
        cps: tuple[int, ...] = checkpoints,
    ) -> None:
        cfg = InversionConfig(checkpoints=cps, lr=0.1, tv_weight=1e-3)
        res = invert_update(
            model,
            upd,
            input_shape=(labels.shape[0], 3, 16, 16),
            labels=labels,
            loss_fn=bce,
            config=cfg,
            client_sizes=sizes,
            # Long runs (8000 steps ~ 40+ min): a line per checkpoint as it is reached.
            progress=lambda s, m: log(f"inversion {setting}: step {s} reached, match {m:.2e}"),
        )
        for cp in res.checkpoints:
            rep = reconstruction_report(
                orig,
                cp.reconstruction,
                pool,
                best_match=len(orig) > 1,
                attack="inverting-gradients",
                setting=setting,
                step=cp.step,
            )
            rows.append({**rep.summary_row(), "match_loss": round(cp.match_loss, 4)})
            log(f"inversion {setting} step {cp.step}: PSNR {rows[-1]['value']} dB ({rep.verdict})")
        reports.append(rep)
        finals[setting] = res.final.reconstruction

    grads = [
        compute_update(model, bce, images[k : k + 1], one_hot(k), param_names=names)
        for k in range(3)
    ]
    attack(grads[0], one_hot(0), images[:1], "unprotected (1 client, 1 sample)", None)
    # Refused by the library by default (min_samples 16): what a client that lowers it leaks.
    summed = secure_mean(grads, [1, 1, 1], rng=rng)
    lowered = f"{SINGLES}, min_samples lowered to 1)"
    attack(summed, one_hot(0), images[:3], f"{lowered}, single-image attacker", None)
    labels3 = torch.cat([one_hot(k) for k in range(3)])
    attack(summed, labels3, images[:3], f"{lowered}, batch-aware attacker", [1, 1, 1])
    # Realistic clients: 8 images each, 3 local SGD steps; the attacker reconstructs all 24,
    # replaying the 3 steps per client (each attack step costs ~24x a single-sample one).
    labels24 = torch.cat([one_hot(k, 8) for k in range(3)])
    local = [
        compute_update(
            model,
            bce,
            images[3 + 8 * k : 11 + 8 * k],
            one_hot(k, 8),
            kind=UpdateKind.DELTA,
            local_steps=3,
            local_lr=0.1,
            param_names=names,
        )
        for k in range(3)
    ]
    attack(
        secure_mean(local, [8, 8, 8], rng=rng),
        labels24,
        images[3:27],
        f"{REALISTIC_IMAGES}, batch-aware attacker",
        [8, 8, 8],
        tuple(sorted({c for c in (1000, 5000) if c < realistic_steps} | {realistic_steps})),
    )
    flat0 = torch.cat([grads[0].tensors[k].reshape(-1) for k in names]).double().numpy()
    noisy = clip_and_noise(flat0, DP, min_survivors=1, max_weight=1, rng=rng)
    attack(
        CapturedUpdate(unflatten(noisy, grads[0].tensors)),
        one_hot(0),
        images[:1],
        "DP (C=1, z=1, 1 client)",
        None,
    )
    if out is not None:
        for i, (setting, orig) in enumerate(
            [(reports[0].setting, images[:1]), (reports[2].setting, images[:3])]
        ):
            rec = finals[setting]  # (N, 3, 16, 16)
            paired = align_to_originals(rec, orig)  # each reconstruction's best-matching original
            grid = plot_reconstruction_grid(
                paired,
                {"attack": rec},
                out / f"reconstructions_{i}.png",
                baselines=baseline_guesses(paired, pool),
            )
            reports[2 * i].figures.append(grid.name)
    return rows, reports


def unflatten(vec: np.ndarray, like: Any) -> dict[str, Tensor]:
    """Split a flat (P,) vector back into tensors shaped and ordered like ``like``."""
    out, offset = {}, 0
    for name, t in like.items():
        out[name] = torch.from_numpy(vec[offset : offset + t.numel()]).float().reshape(t.shape)
        offset += t.numel()
    return out


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
    only; each DP training takes ~30 s here, one per shadow model too)."""
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
        eps = run.target.spent_epsilon
        log(
            f"MIA {run.setting}: epsilon spent {'-' if eps is None else f'{eps:.3f}'}, "
            f"accuracy on own pairs {run.member_accuracy:.2f}, on unseen pairs "
            f"{run.non_member_accuracy:.2f}"
        )
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer inversion steps")
    ap.add_argument(
        "--real-rm",
        action="store_true",
        help="also Table 6 on a real sdk.reward RewardModel (on in full mode)",
    )
    ap.add_argument(
        "--realistic-steps", type=int, help="attack steps on the realistic SecAgg images row"
    )
    ap.add_argument("--out", type=Path, help="also write report.json/report.html and PNGs here")
    args = ap.parse_args()
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
    words = protection_summary(mia + real_rm, dp_runs)
    for line in words:
        log(line)

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
        "headline": headline,
        "seconds": round(time.time() - T0, 1),
    }
    if args.out is not None:
        write_report(
            AuditReport(
                title="fedmor attack benchmark (Tables 5 and 6)",
                reconstructions=inversion_reports,
                memberships=mia + real_rm,
                notes=[
                    "Gradient inversion on real router updates; membership inference on "
                    "an over-fitted small torch reward model, plain and trained with "
                    "record-level DP-SGD (and a real RewardModel with --real-rm). Figures at "
                    "the last step.",
                    *words,
                ],
            ),
            args.out,
        )
        log(f"wrote {args.out / 'report.html'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
