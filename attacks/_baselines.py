"""Trivial reconstruction baselines, scored with the same metrics as an attack.

An attack only shows a leak when it beats what needs no access to the update at all:
a flat grey image, the dataset mean image, an unrelated image from the same distribution.
"""

from __future__ import annotations

import numpy as np

from attacks._errors import AttackInputError
from attacks._metrics import (
    ArrayLike,
    Layout,
    MetricSummary,
    SSIMParams,
    as_nchw,
    cosine_per_row,
    mean_ci,
    psnr_per_image,
    ssim_per_image,
)

__all__ = [
    "BASELINE_NAMES",
    "align_to_originals",
    "as_batch",
    "baseline_guesses",
    "reconstruction_baselines",
    "score_reconstruction",
]

BASELINE_NAMES: tuple[str, ...] = ("grey", "dataset_mean", "unrelated")
"""The trivial reconstructions an attack must beat to count as a leak."""
_POOL_BOOT = 200  # pool resamples behind the dataset-mean interval


def _per_item(
    originals: np.ndarray, guesses: np.ndarray, params: SSIMParams | None
) -> dict[str, np.ndarray]:
    if originals.ndim == 4:
        return {
            "psnr": psnr_per_image(guesses, originals),
            "ssim": ssim_per_image(guesses, originals, params=params),
        }
    return {"cosine": cosine_per_row(guesses, originals)}


def score_reconstruction(
    originals: ArrayLike,
    reconstructions: ArrayLike,
    *,
    layout: Layout = "NCHW",
    ssim_params: SSIMParams | None = None,
    seed: int = 0,
) -> dict[str, MetricSummary]:
    """Score reconstructions against originals: PSNR and SSIM for 4-D image batches,
    cosine for (N, D) embeddings; each a mean with a bootstrap interval over items."""
    orig, rec = as_batch(originals, layout), as_batch(reconstructions, layout)
    if orig.shape != rec.shape:
        raise AttackInputError(f"originals {orig.shape} and reconstructions {rec.shape} differ")
    per = _per_item(orig, rec, ssim_params)
    return {k: mean_ci(v, metric=k, seed=seed) for k, v in per.items()}


def as_batch(x: ArrayLike, layout: Layout = "NCHW") -> np.ndarray:
    """float64 images (N, C, H, W) from ``layout``, or embeddings (N, D) unchanged."""
    arr = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    if arr.ndim == 4:
        return as_nchw(arr, layout)
    if arr.ndim == 2:
        return arr
    raise AttackInputError(f"expected images (N, C, H, W) or embeddings (N, D), got {arr.shape}")


def reconstruction_baselines(
    originals: ArrayLike,
    pool: ArrayLike,
    *,
    best_match: bool = False,
    layout: Layout = "NCHW",
    ssim_params: SSIMParams | None = None,
    seed: int = 0,
) -> dict[str, dict[str, MetricSummary]]:
    """Baseline name -> metric -> summary, for guesses made without the update.

    ``pool`` holds other samples from the same distribution (never the originals themselves):
    its mean is the dataset-mean guess, and every pool item is an unrelated guess (so the
    unrelated baseline has an interval even for one original). The grey guess (0.5
    everywhere) applies to images only; embeddings get dataset_mean and unrelated (cosine).

    By default each guess is scored against every original. With ``best_match`` each guess is
    scored against the original it matches best, the same credit :func:`align_to_originals`
    gives an attack that reconstructs from an aggregate of many samples.
    """
    orig, pl = as_batch(originals, layout), as_batch(pool, layout)
    if orig.shape[1:] != pl.shape[1:]:
        raise AttackInputError(f"pool items {pl.shape[1:]} differ from originals {orig.shape[1:]}")
    if pl.shape[0] < 1:
        raise AttackInputError("the baseline pool is empty")
    guesses: dict[str, np.ndarray] = {}
    if orig.ndim == 4:
        guesses["grey"] = np.full_like(orig[:1], 0.5)
    guesses["dataset_mean"] = pl.mean(axis=0, keepdims=True)
    guesses["unrelated"] = pl
    out = {
        name: {k: mean_ci(v, metric=k, seed=seed) for k, v in per.items()}
        for name, per in (
            (n, _score_guess(orig, g, best_match, ssim_params)) for n, g in guesses.items()
        )
    }
    # The dataset mean is itself estimated from a finite pool: its interval comes from
    # resampling the pool (seeded), not from the originals alone.
    rng = np.random.default_rng(seed)
    boots: dict[str, list[float]] = {k: [] for k in out["dataset_mean"]}
    for _ in range(_POOL_BOOT):
        g = pl[rng.integers(0, pl.shape[0], pl.shape[0])].mean(axis=0, keepdims=True)
        for k, v in _score_guess(orig, g, best_match, ssim_params).items():
            boots[k].append(float(v.mean()))
    for k, vals in boots.items():
        point = out["dataset_mean"][k]
        lo, hi = np.quantile(vals, [0.025, 0.975])
        out["dataset_mean"][k] = point.model_copy(
            update={
                "ci_low": min(float(lo), point.ci_low),
                "ci_high": max(float(hi), point.ci_high),
            }
        )
    return out


def _score_guess(
    orig: np.ndarray, g: np.ndarray, best_match: bool, params: SSIMParams | None
) -> dict[str, np.ndarray]:
    if best_match:
        return _per_item(align_to_originals(g, orig), g, params)
    # Every (original, guess) pair: (N*G, ...) each.
    o = np.repeat(orig, g.shape[0], axis=0)
    return _per_item(o, np.tile(g, (orig.shape[0],) + (1,) * (g.ndim - 1)), params)


def align_to_originals(
    reconstructions: ArrayLike, candidates: ArrayLike, *, layout: Layout = "NCHW"
) -> np.ndarray:
    """For each reconstruction, the candidate original it matches best (highest PSNR for
    images, highest cosine for embeddings): credits the attacker with the best pairing, e.g.
    when one image is reconstructed from an aggregate over several clients' samples."""
    rec, cand = as_batch(reconstructions, layout), as_batch(candidates, layout)
    if rec.shape[1:] != cand.shape[1:]:
        raise AttackInputError(f"candidates {cand.shape[1:]} differ from {rec.shape[1:]}")
    picked = []
    for r in rec:
        many = np.repeat(r[None], cand.shape[0], axis=0)
        sim = psnr_per_image(many, cand) if rec.ndim == 4 else cosine_per_row(many, cand)
        picked.append(cand[int(np.argmax(sim))])
    return np.stack(picked)


def baseline_guesses(
    originals: ArrayLike, pool: ArrayLike, *, layout: Layout = "NCHW", seed: int = 0
) -> dict[str, np.ndarray]:
    """The baseline guesses themselves, aligned with ``originals`` (for plotting): grey
    (images only), the pool mean, and one seeded random pool item per original."""
    orig, pl = as_batch(originals, layout), as_batch(pool, layout)
    n = orig.shape[0]
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    if orig.ndim == 4:
        out["grey"] = np.full_like(orig, 0.5)
    out["dataset_mean"] = np.repeat(pl.mean(axis=0, keepdims=True), n, axis=0)
    out["unrelated"] = pl[rng.integers(0, pl.shape[0], size=n)]
    return out
