"""Reconstruction metrics: PSNR, SSIM (one pinned implementation) and cosine similarity.

Images are float arrays in [0, 1], shaped (N, C, H, W) (``layout="NCHW"``, the default) or
(N, H, W, C) (``layout="NHWC"``). Every metric is computed per image (or per embedding row) and
the figure reported is the mean of the per-item values, so that a bootstrap interval over items
can be put beside it (:func:`mean_ci`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from attacks._errors import AttackInputError

__all__ = [
    "PSNR_CAP_DB",
    "ArrayLike",
    "Layout",
    "MetricSummary",
    "SSIMParams",
    "as_nchw",
    "cosine_per_row",
    "cosine_similarity",
    "mean_ci",
    "psnr",
    "psnr_per_image",
    "ssim",
    "ssim_per_image",
]

Layout = Literal["NCHW", "NHWC"]
ArrayLike = np.ndarray | torch.Tensor

# PSNR of identical images is infinite; we cap it so that figures stay finite in JSON. An MSE
# floor of 1e-10 on [0, 1] images gives exactly 100 dB.
PSNR_CAP_DB = 100.0
"""PSNR reported for an exact reconstruction (zero error) instead of infinity."""
_MSE_FLOOR = 10.0 ** (-PSNR_CAP_DB / 10.0)


class SSIMParams(BaseModel):
    """The pinned SSIM parameters (Wang et al. 2004), reported beside every SSIM figure.

    With these values :func:`ssim` equals scikit-image's ``structural_similarity`` with
    ``gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_size: int = 11
    sigma: float = 1.5
    k1: float = 0.01
    k2: float = 0.03
    data_range: float = 1.0
    padding: Literal["valid"] = "valid"
    aggregation: Literal["per-channel mean, then mean over images"] = (
        "per-channel mean, then mean over images"
    )


class MetricSummary(BaseModel):
    """A mean over items with a seeded percentile-bootstrap interval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    mean: float
    ci_low: float
    ci_high: float
    n: int


def _to_numpy(x: ArrayLike) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def as_nchw(images: ArrayLike, layout: Layout = "NCHW") -> np.ndarray:
    """Return float64 images shaped (N, C, H, W); raise if not a 4-D batch in [0, 1]."""
    arr = _to_numpy(images)
    if arr.ndim != 4:
        raise AttackInputError(f"images must be a 4-D batch ({layout}), got shape {arr.shape}")
    if layout == "NHWC":
        arr = arr.transpose(0, 3, 1, 2)
    if not np.isfinite(arr).all():
        raise AttackInputError("images contain NaN or infinite values")
    if arr.min() < -1e-6 or arr.max() > 1.0 + 1e-6:
        raise AttackInputError(
            f"images must lie in [0, 1], got range [{arr.min():.3g}, {arr.max():.3g}]"
        )
    return arr


def _pair(a: ArrayLike, b: ArrayLike, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    x, y = as_nchw(a, layout), as_nchw(b, layout)
    if x.shape != y.shape:
        raise AttackInputError(f"image batches differ in shape: {x.shape} vs {y.shape}")
    return x, y


def psnr_per_image(a: ArrayLike, b: ArrayLike, *, layout: Layout = "NCHW") -> np.ndarray:
    """PSNR in dB of each image pair, shape (N,); identical images give PSNR_CAP_DB."""
    x, y = _pair(a, b, layout)
    mse = ((x - y) ** 2).reshape(x.shape[0], -1).mean(axis=1)  # (N,)
    return np.asarray(10.0 * np.log10(1.0 / np.maximum(mse, _MSE_FLOOR)))


def psnr(a: ArrayLike, b: ArrayLike, *, layout: Layout = "NCHW") -> float:
    """Mean of per-image PSNRs (dB) of two [0, 1] batches; capped at PSNR_CAP_DB per image."""
    return float(psnr_per_image(a, b, layout=layout).mean())


def _gaussian_window(params: SSIMParams) -> torch.Tensor:
    half = (params.window_size - 1) / 2.0
    t = torch.arange(params.window_size, dtype=torch.float64) - half
    g = torch.exp(-(t**2) / (2.0 * params.sigma**2))
    return g / g.sum()  # (W,)


def ssim_per_image(
    a: ArrayLike,
    b: ArrayLike,
    *,
    layout: Layout = "NCHW",
    params: SSIMParams | None = None,
) -> np.ndarray:
    """SSIM of each image pair, shape (N,): valid-padded Gaussian SSIM map, mean per channel,
    then mean over channels. Images must be at least ``window_size`` pixels on each side."""
    p = params or SSIMParams()
    x, y = _pair(a, b, layout)
    _, c, h, w = x.shape
    if h < p.window_size or w < p.window_size:
        raise AttackInputError(
            f"SSIM needs images of at least {p.window_size}x{p.window_size}, got {h}x{w}"
        )
    g = _gaussian_window(p)
    # Separable depthwise blur: (C, 1, W, 1) then (C, 1, 1, W).
    gv = g.view(1, 1, -1, 1).repeat(c, 1, 1, 1)
    gh = g.view(1, 1, 1, -1).repeat(c, 1, 1, 1)

    def blur(t: torch.Tensor) -> torch.Tensor:
        t = torch.nn.functional.conv2d(t, gv, groups=c)
        return torch.nn.functional.conv2d(t, gh, groups=c)  # (N, C, H-W+1, W-W+1)

    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    mu_x, mu_y = blur(tx), blur(ty)
    sxx = blur(tx * tx) - mu_x**2
    syy = blur(ty * ty) - mu_y**2
    sxy = blur(tx * ty) - mu_x * mu_y
    c1 = (p.k1 * p.data_range) ** 2
    c2 = (p.k2 * p.data_range) ** 2
    smap = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
    per_channel = smap.mean(dim=(2, 3))  # (N, C)
    return per_channel.mean(dim=1).numpy()


def ssim(
    a: ArrayLike, b: ArrayLike, *, layout: Layout = "NCHW", params: SSIMParams | None = None
) -> float:
    """Mean SSIM over the batch with the pinned :class:`SSIMParams`."""
    return float(ssim_per_image(a, b, layout=layout, params=params).mean())


def cosine_per_row(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Cosine similarity of each row of two (N, D) embedding batches, shape (N,)."""
    x, y = _to_numpy(a), _to_numpy(b)
    if x.ndim == 1:
        x, y = x[None], y.reshape(1, -1)
    if x.ndim != 2 or x.shape != y.shape:
        raise AttackInputError(f"embeddings must both be (N, D), got {x.shape} and {y.shape}")
    num = (x * y).sum(axis=1)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.asarray(num / np.maximum(den, 1e-12))


def cosine_similarity(a: ArrayLike, b: ArrayLike) -> float:
    """Mean row-wise cosine similarity of two (N, D) (or (D,)) embedding batches."""
    return float(cosine_per_row(a, b).mean())


def mean_ci(
    values: ArrayLike,
    *,
    metric: str,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> MetricSummary:
    """Mean of per-item values with a seeded percentile-bootstrap interval (degenerate if N=1)."""
    _check_level(level)
    v = _to_numpy(values).reshape(-1)
    if v.size == 0:
        raise AttackInputError(f"no values to summarize for metric {metric!r}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    means = v[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    m = float(v.mean())
    # The percentile interval can exclude the mean by rounding; widen it to contain it.
    return MetricSummary(
        metric=metric, mean=m, ci_low=min(float(lo), m), ci_high=max(float(hi), m), n=int(v.size)
    )


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0 or math.isnan(level):
        raise AttackInputError(f"confidence level must be in (0, 1), got {level}")
