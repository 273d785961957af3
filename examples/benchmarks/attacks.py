# ruff: noqa: E402  (the sys.path fix below must run before the imports)
"""The paper's Tables 5 and 6, measured against what actually travels, with CIs and baselines.

Gradient inversion (Table 5) runs on REAL router updates (sdk.router ``Router``,
``HashingEncoder`` tokens, ``train_router_locally``), in the settings unprotected (one client,
one sample), SecAgg (the sum of >= 3 clients' updates, aggregated by sdk.secagg's
``simulate_round``: the server only sees the sum) and DP (sdk.secagg ``clip_and_noise``).
The optimization attack on images puts a small differentiable image encoder (two convs, one
token per 4x4 patch) in front of the same Router: the update covers the router only.

Membership inference (Table 6) runs the threshold attack on the reward margin of a deliberately
over-fitted small torch reward model (an MLP on random pair features, full-batch Bradley-Terry),
raw scores vs the same scores behind sdk.reward's ``ScoreNormalizer`` ("Norm": clip 1e9) and
with clipping at c = 1.5 and 2.0 ("Norm+Clip").

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
from torch.nn.attention import SDPBackend, sdpa_kernel

from attacks import (
    AuditReport,
    CapturedUpdate,
    InversionConfig,
    MembershipReport,
    ReconstructionReport,
    align_to_originals,
    analytic_linear_inversion,
    baseline_guesses,
    invert_update,
    membership_report,
    plot_reconstruction_grid,
    reconstruction_report,
    threshold_attack,
    write_report,
)
from sdk.reward import ScoreNormalizer
from sdk.router import (
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    Router,
    RouterConfig,
    train_router_locally,
)
from sdk.secagg import DPConfig, clip_and_noise, simulate_round

CLIENTS = ["a", "b", "c"]
T0 = time.time()


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


def router_grads(router: Router, hidden: Tensor, mask: Tensor, k: int) -> dict[str, Tensor]:
    """One client's gradient of the router on its samples (what FedSGD would send)."""
    router.zero_grad()
    bce(router(hidden, mask), one_hot(k, hidden.shape[0])).backward()
    return {n: p.grad.detach().clone() for n, p in router.named_parameters() if p.grad is not None}


def as_tensors(router: Router, flat: np.ndarray) -> dict[str, Tensor]:
    """Unflatten a (P,) router vector into named tensors (Router's own flattening order)."""
    probe = make_router(router.config.input_dim)
    probe.set_flat_params(flat.astype(np.float32))
    return {n: p.detach().clone() for n, p in probe.named_parameters()}


def summary(rep: ReconstructionReport) -> dict[str, Any]:
    m = rep.metrics[rep.primary_metric]
    return {
        "setting": rep.setting,
        "attack": rep.attack,
        "step": rep.step,
        "metric": rep.primary_metric,
        "value": round(m.mean, 4),
        "ci": [round(m.ci_low, 4), round(m.ci_high, 4)],
        "ssim": round(rep.metrics["ssim"].mean, 4) if "ssim" in rep.metrics else None,
        "baselines": {
            name: {
                "value": round(b[rep.primary_metric].mean, 4),
                "ci": [
                    round(b[rep.primary_metric].ci_low, 4),
                    round(b[rep.primary_metric].ci_high, 4),
                ],
            }
            for name, b in rep.baselines.items()
        },
        "verdict": rep.verdict,
    }


# ---- Table 5a: analytic attack on the router's first linear layer ------------------------


def encoded_samples(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """(n, T, D) HashingEncoder tokens of random images, prompts and responses, and the mask."""
    rng = np.random.default_rng(seed)
    enc = HashingEncoder(HashingEncoderConfig(dim=32))
    words = ["red", "blue", "green", "yellow", "square", "circle", "left", "right", "tall", "the"]
    images = [Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)) for _ in range(n)]
    prompts = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    responses = [" ".join(rng.choice(words, int(rng.integers(2, 8)))) for _ in range(n)]
    b = enc.encode(images, prompts, responses)
    return b.hidden, b.mask


def pooled(hidden: Tensor, mask: Tensor) -> Tensor:
    """The sample's embedding: its mean token (n, D), what input_proj's update mixes."""
    w = mask.unsqueeze(-1).float()
    return (hidden * w).sum(1) / w.sum(1)


def table5_analytic(rng: np.random.Generator) -> list[dict[str, Any]]:
    hidden, mask = encoded_samples(67, seed=0)
    targets, pool = pooled(hidden, mask)[:3], pooled(hidden, mask)[3:]
    router = make_router(32)
    before = router.get_flat_params()
    local = LocalTrainingConfig(epochs=2, batch_size=32, lr=1e-3)
    deltas = [
        train_router_locally(router, (hidden[k : k + 1], mask[k : k + 1]), k, local).params - before
        for k in range(3)
    ]
    rows: list[dict[str, Any]] = []

    def attack(upd: dict[str, Tensor], orig: Tensor, setting: str, best: bool = False) -> None:
        x = analytic_linear_inversion(upd["input_proj.weight"], upd["input_proj.bias"])
        rep = reconstruction_report(
            orig, x[None], pool, attack="analytic", setting=setting, best_match=best
        )
        rows.append(summary(rep))
        log(f"analytic {setting}: cosine {rows[-1]['value']} ({rep.verdict})")

    attack(router_grads(router, hidden[:1], mask[:1], 0), targets[:1], "unprotected (gradient)")
    attack(as_tensors(router, deltas[0]), targets[:1], "unprotected (train_router_locally delta)")
    agg = simulate_round([d.astype(np.float64) for d in deltas], [1, 1, 1], rng=rng)
    attack(
        as_tensors(router, agg.weighted_sum), targets, "SecAgg (3 clients x 1 sample)", best=True
    )
    dp = DPConfig(clip_norm=1.0, noise_multiplier=1.0)
    noisy = clip_and_noise(deltas[0], dp, min_survivors=1, max_weight=1, rng=rng)
    attack(as_tensors(router, noisy), targets[:1], "DP (C=1, z=1, 1 client)")
    return rows


# ---- Table 5b: optimization attack on images through a differentiable encoder --------------


class PatchEncoder(nn.Module):
    """A small differentiable image encoder in the ViT style: a 2x2 patch embedding (a conv),
    a sigmoid-gated depthwise mix, and fixed position embeddings: (B, 3, 16, 16) -> (B, 64, 32)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.patch = nn.Conv2d(3, 32, 2, stride=2)
        self.mix = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        # Fixed position embeddings, as in a ViT: the Router has none and mean-pools, so without
        # them the update would not tell the patches' places apart (a patch shuffle is invisible).
        self.register_buffer("pos", torch.randn(64, 32))

    def forward(self, images: Tensor) -> Tensor:
        h = self.patch(images)  # (B, 32, 8, 8)
        h = h + torch.sigmoid(self.mix(h))  # (B, 32, 8, 8)
        return h.flatten(2).transpose(1, 2) + self.pos  # (B, 64, 32)


class ImageRouter(nn.Module):
    """The frozen image encoder in front of the real Router; the update covers the router."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = PatchEncoder().requires_grad_(False)
        self.router = make_router(32)

    def forward(self, images: Tensor) -> Tensor:
        tokens = self.encoder(images)  # (B, 64, 32)
        mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
        # The attack differentiates the update w.r.t. the image (a second derivative): only
        # the math attention kernel implements that on CPU.
        with sdpa_kernel(SDPBackend.MATH):
            return self.router(tokens, mask)  # (B, K)


def smooth_images(n: int, seed: int) -> Tensor:
    """(n, 3, 16, 16) images in [0, 1]: a flat background with three soft colour blobs."""
    g = torch.Generator().manual_seed(seed)
    axis = torch.linspace(0, 1, 16)
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    out = torch.empty(n, 3, 16, 16)
    for i in range(n):
        img = (0.5 * torch.rand(3, 1, 1, generator=g)).expand(3, 16, 16).clone()
        for _ in range(3):
            c, r = torch.rand(2, generator=g), 0.1 + 0.25 * torch.rand(1, generator=g)
            blob = torch.exp(-((xx - c[0]) ** 2 + (yy - c[1]) ** 2) / (2 * r**2))
            img = img * (1 - blob) + torch.rand(3, 1, 1, generator=g) * blob
        out[i] = img.clamp(0, 1)
    return out


def grads_of(model: ImageRouter, images: Tensor, labels: Tensor) -> dict[str, Tensor]:
    model.zero_grad()
    bce(model(images), labels).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def unflatten(vec: np.ndarray, like: dict[str, Tensor]) -> dict[str, Tensor]:
    """Split a flat (P,) vector back into tensors shaped and ordered like ``like``."""
    out, offset = {}, 0
    for name, t in like.items():
        out[name] = torch.from_numpy(vec[offset : offset + t.numel()]).float().reshape(t.shape)
        offset += t.numel()
    return out


def table5_images(
    steps: int, rng: np.random.Generator, out: Path | None
) -> tuple[list[dict[str, Any]], list[ReconstructionReport]]:
    """Inverting gradients per setting; the final-step reports (and, with ``out``, a grid of
    every setting's final reconstruction beside the originals and the baselines)."""
    model = ImageRouter()
    images, pool = smooth_images(3, seed=0), smooth_images(64, seed=5)
    per_client = [grads_of(model, images[k : k + 1], one_hot(k)) for k in range(3)]
    names = list(per_client[0])
    checkpoints = tuple(sorted({max(steps // 4, 1), steps}))
    cfg = InversionConfig(checkpoints=checkpoints, lr=0.1, tv_weight=1e-3)
    rows: list[dict[str, Any]] = []
    reports: list[ReconstructionReport] = []
    finals: dict[str, Tensor] = {}

    def attack(upd: dict[str, Tensor], n: int, labels: Tensor, orig: Tensor, setting: str) -> None:
        res = invert_update(
            model,
            CapturedUpdate(upd),
            input_shape=(n, 3, 16, 16),
            labels=labels,
            loss_fn=bce,
            config=cfg,
            client_sizes=[1] * n if n > 1 else None,
        )
        best = orig.shape[0] > 1
        for cp in res.checkpoints:
            rep = reconstruction_report(
                orig,
                cp.reconstruction,
                pool,
                attack="inverting-gradients",
                setting=setting,
                best_match=best,
                step=cp.step,
            )
            rows.append(summary(rep))
            log(f"inversion {setting} step {cp.step}: PSNR {rows[-1]['value']} dB ({rep.verdict})")
        reports.append(rep)
        finals[setting] = res.final.reconstruction

    attack(per_client[0], 1, one_hot(0), images[:1], "unprotected (1 client, 1 sample)")
    flat = [torch.cat([g[n].reshape(-1) for n in names]).double().numpy() for g in per_client]
    summed = unflatten(simulate_round(flat, [1, 1, 1], rng=rng).weighted_sum, per_client[0])
    attack(summed, 1, one_hot(0), images, "SecAgg (3 clients x 1 sample), single-image attacker")
    labels3 = torch.cat([one_hot(k) for k in range(3)])
    attack(summed, 3, labels3, images, "SecAgg (3 clients x 1 sample), batch-aware attacker")
    dp = DPConfig(clip_norm=1.0, noise_multiplier=1.0)
    noisy = clip_and_noise(flat[0], dp, min_survivors=1, max_weight=1, rng=rng)
    attack(unflatten(noisy, per_client[0]), 1, one_hot(0), images[:1], "DP (C=1, z=1, 1 client)")
    if out is not None:
        for i, (setting, orig) in enumerate(
            [(reports[0].setting, images[:1]), (reports[2].setting, images)]
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


# ---- Table 6: membership inference on reward scores ----------------------------------------


def pair_features(n: int, dim: int, seed: int) -> tuple[Tensor, Tensor]:
    """(n, 2*dim) chosen and rejected features; the preference is a weak signal plus noise."""
    g = torch.Generator().manual_seed(seed)
    x, a, b = (torch.randn(n, dim, generator=g) for _ in range(3))
    w = torch.randn(dim, generator=torch.Generator().manual_seed(99))
    first = (((a - b) @ w) * 0.1 + torch.randn(n, generator=g) > 0)[:, None]
    chosen, rejected = torch.where(first, a, b), torch.where(first, b, a)
    return torch.cat([x, chosen], 1), torch.cat([x, rejected], 1)


def table6(n: int, epochs: int) -> list[MembershipReport]:
    pos, neg = pair_features(2 * n, 16, seed=0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):  # full batch on the n members, no regularization: it over-fits
        opt.zero_grad()
        (-nn.functional.logsigmoid(model(pos[:n]) - model(neg[:n])).mean()).backward()
        opt.step()
    with torch.no_grad():
        raw_pos, raw_neg = model(pos).reshape(-1), model(neg).reshape(-1)  # (2n,)
    # mu, sigma from the client's training responses, as sdk.reward does after training.
    train_scores = torch.cat([raw_pos[:n], raw_neg[:n]])
    settings = {"unprotected (raw)": None, "Norm": 1e9, "Norm+Clip 1.5": 1.5, "Norm+Clip 2.0": 2.0}
    out = []
    for name, clip in settings.items():
        norm = None if clip is None else ScoreNormalizer.fit(train_scores, clip=clip)

        def scorer(idx: list[int], norm: ScoreNormalizer | None = norm) -> np.ndarray:
            i = torch.as_tensor(idx)
            p, q = raw_pos[i], raw_neg[i]
            if norm is not None:
                p, q = norm.normalize(p), norm.normalize(q)
            return (p - q).double().numpy()

        rep = membership_report(
            threshold_attack(scorer, list(range(n)), list(range(n, 2 * n))), setting=name
        )
        log(
            f"MIA {name}: AUC {rep.auc:.3f} [{rep.auc_ci[0]:.3f}, {rep.auc_ci[1]:.3f}] ({rep.verdict})"
        )
        out.append(rep)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="fewer inversion steps (~2 min on 2 cores)"
    )
    ap.add_argument("--out", type=Path, help="also write report.json/report.html and PNGs here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    steps = 500 if args.quick else 2000
    rng = np.random.default_rng(0)
    log("Table 5a: analytic attack on real router updates")
    analytic = table5_analytic(rng)
    log(f"Table 5b: inverting-gradients on images through a conv encoder + Router ({steps} steps)")
    images, inversion_reports = table5_images(steps, rng, args.out)
    log("Table 6: membership inference on reward scores")
    mia = table6(n=100, epochs=300)
    final = [r for r in images if r["step"] == steps]

    def value(rows: list[dict[str, Any]], prefix: str) -> float:
        return float(next(r["value"] for r in rows if r["setting"].startswith(prefix)))

    clip15 = next(r for r in mia if r.setting == "Norm+Clip 1.5")
    headline = {
        "analytic_cosine_unprotected": value(analytic, "unprotected (gradient)"),
        "inversion_psnr_unprotected": value(final, "unprotected"),
        "inversion_psnr_secagg": value(final, "SecAgg (3 clients x 1 sample), single"),
        "inversion_psnr_secagg_batch_aware": value(final, "SecAgg (3 clients x 1 sample), batch"),
        "grey_baseline_psnr": float(final[0]["baselines"]["grey"]["value"]),
        "mia_auc_unprotected": round(mia[0].auc, 4),
        "mia_auc_norm_clip": round(clip15.auc, 4),
        "mia_auc_norm_clip_ci": [round(clip15.auc_ci[0], 4), round(clip15.auc_ci[1], 4)],
    }
    result = {
        "benchmark": "attacks",
        "quick": args.quick,
        "inversion_steps": steps,
        "mia_reward_model": "small torch MLP reward model (attack-kit style), over-fitted on 100 pairs",
        "table5_analytic": analytic,
        "table5_inversion": images,
        "table6_membership": [
            {
                "setting": r.setting,
                "auc": round(r.auc, 4),
                "auc_ci": [round(c, 4) for c in r.auc_ci],
                "null_band": [round(c, 4) for c in r.null_band],
                "tpr_at_fpr": r.tpr_at_fpr,
                "verdict": r.verdict,
            }
            for r in mia
        ],
        "headline": headline,
        "seconds": round(time.time() - T0, 1),
    }
    if args.out is not None:
        write_report(
            AuditReport(
                title="fedmor attack benchmark (Tables 5 and 6)",
                reconstructions=inversion_reports,
                memberships=mia,
                notes=[
                    "Gradient inversion on real router updates; membership inference on "
                    "an over-fitted small torch reward model. Figures at the last step."
                ],
            ),
            args.out,
        )
        log(f"wrote {args.out / 'report.html'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
