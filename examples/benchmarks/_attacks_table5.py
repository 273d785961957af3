"""Table 5 of attack_tables.py: gradient inversion of real router updates (embeddings, as
``fedmor audit`` attacks a captured update) and of images through a differentiable encoder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from attacks import (
    CapturedAttackConfig,
    CapturedUpdate,
    InversionConfig,
    PatchImageRouter,
    ReconstructionReport,
    UpdateKind,
    align_to_originals,
    attack_captured_update,
    baseline_guesses,
    capture_round,
    compute_update,
    invert_update,
    plot_reconstruction_grid,
    reconstruction_report,
    secure_mean,
    smooth_images,
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


class _Inversions:
    """Inverting-gradients runs against ``model``'s router updates, their rows (one per
    checkpoint), final-step reports and final reconstructions, by setting."""

    def __init__(self, model: PatchImageRouter, pool: Tensor, checkpoints: tuple[int, ...]
                 ) -> None:
        self.model, self.pool, self.checkpoints = model, pool, checkpoints
        self.rows: list[dict[str, Any]] = []
        self.reports: list[ReconstructionReport] = []
        self.finals: dict[str, Tensor] = {}

    def attack(self, upd: CapturedUpdate, labels: Tensor, orig: Tensor, setting: str,
               sizes: list[int] | None, cps: tuple[int, ...] | None = None) -> None:
        """Invert ``upd`` (``sizes``: the clients' batch sizes a batch-aware attacker knows)
        and score each checkpoint's reconstruction against ``orig`` and the baselines."""
        cfg = InversionConfig(checkpoints=cps or self.checkpoints, lr=0.1, tv_weight=1e-3)
        res = invert_update(
            self.model,
            upd,
            input_shape=(labels.shape[0], 3, 16, 16),
            labels=labels,
            loss_fn=bce,
            config=cfg,
            client_sizes=sizes,
            # Long runs: a line per checkpoint as it is reached.
            progress=lambda s, m: log(f"inversion {setting}: step {s} reached, match {m:.2e}"),
        )
        for cp in res.checkpoints:
            rep = reconstruction_report(orig, cp.reconstruction, self.pool,
                                        best_match=len(orig) > 1, attack="inverting-gradients",
                                        setting=setting, step=cp.step)
            self.rows.append({**rep.summary_row(), "match_loss": round(cp.match_loss, 4)})
            log(f"inversion {setting} step {cp.step}: PSNR {self.rows[-1]['value']} dB "
                f"({rep.verdict})")
        self.reports.append(rep)
        self.finals[setting] = res.final.reconstruction

    def write_grids(self, out: Path, shown: list[tuple[int, Tensor]]) -> None:
        """A grid per (report index, originals): the reconstructions beside the originals they
        match best and the baselines, named in the report's figures."""
        for i, (index, orig) in enumerate(shown):
            rec = self.finals[self.reports[index].setting]  # (N, 3, 16, 16)
            paired = align_to_originals(rec, orig)  # each reconstruction's best-matching original
            grid = plot_reconstruction_grid(paired, {"attack": rec},
                                            out / f"reconstructions_{i}.png",
                                            baselines=baseline_guesses(paired, self.pool))
            self.reports[index].figures.append(grid.name)


def table5_images(
    steps: int, realistic_steps: int, rng: np.random.Generator, out: Path | None
) -> tuple[list[dict[str, Any]], list[ReconstructionReport]]:
    """Inverting gradients per setting; the final-step reports (and, with ``out``, a grid of
    the reconstructions beside the originals and the baselines)."""
    model = PatchImageRouter(make_router(32), 32)
    names = [n for n, p in model.named_parameters() if p.requires_grad]  # the router only
    images, pool = smooth_images(27, seed=0), smooth_images(64, seed=5)
    runs = _Inversions(model, pool, tuple(sorted({max(steps // 4, 1), steps})))
    grads = [
        compute_update(model, bce, images[k : k + 1], one_hot(k), param_names=names)
        for k in range(3)
    ]
    runs.attack(grads[0], one_hot(0), images[:1], "unprotected (1 client, 1 sample)", None)
    # Refused by the library by default (min_samples 16): what a client that lowers it leaks.
    summed = secure_mean(grads, [1, 1, 1], rng=rng)
    lowered = f"{SINGLES}, min_samples lowered to 1)"
    runs.attack(summed, one_hot(0), images[:3], f"{lowered}, single-image attacker", None)
    labels3 = torch.cat([one_hot(k) for k in range(3)])
    runs.attack(summed, labels3, images[:3], f"{lowered}, batch-aware attacker", [1, 1, 1])
    # Realistic clients: 8 images each, 3 local SGD steps; the attacker reconstructs all 24,
    # replaying the 3 steps per client (each attack step runs all 24 images, not one).
    labels24 = torch.cat([one_hot(k, 8) for k in range(3)])
    local = [
        compute_update(model, bce, images[3 + 8 * k : 11 + 8 * k], one_hot(k, 8),
                       kind=UpdateKind.DELTA, local_steps=3, local_lr=0.1, param_names=names)
        for k in range(3)
    ]
    runs.attack(secure_mean(local, [8, 8, 8], rng=rng), labels24, images[3:27],
                f"{REALISTIC_IMAGES}, batch-aware attacker", [8, 8, 8],
                tuple(sorted({c for c in (1000, 5000) if c < realistic_steps}
                             | {realistic_steps})))
    flat0 = torch.cat([grads[0].tensors[k].reshape(-1) for k in names]).double().numpy()
    noisy = clip_and_noise(flat0, DP, min_survivors=1, max_weight=1, rng=rng)
    runs.attack(CapturedUpdate(unflatten(noisy, grads[0].tensors)), one_hot(0), images[:1],
                "DP (C=1, z=1, 1 client)", None)
    if out is not None:
        runs.write_grids(out, [(0, images[:1]), (2, images[:3])])
    return runs.rows, runs.reports


def unflatten(vec: np.ndarray, like: Any) -> dict[str, Tensor]:
    """Split a flat (P,) vector back into tensors shaped and ordered like ``like``."""
    out, offset = {}, 0
    for name, t in like.items():
        out[name] = torch.from_numpy(vec[offset : offset + t.numel()]).float().reshape(t.shape)
        offset += t.numel()
    return out
