"""Plotting helpers (matplotlib, Agg backend): ROC curves and reconstruction grids as PNGs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: audits run on servers without a display

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attacks._errors import AttackInputError
from attacks._metrics import ArrayLike, Layout, as_nchw
from attacks._roc import RocCurve

__all__ = ["plot_reconstruction_grid", "plot_roc", "roc_figure"]

_LOG_FLOOR = 1e-4  # log axes cannot show 0; points at FPR = 0 are drawn at this floor


def plot_roc(
    curves: Mapping[str, RocCurve],
    path: str | Path,
    *,
    null_band: tuple[float, float] | None = None,
    title: str = "Membership inference ROC",
) -> Path:
    """Write one PNG with two panels: ROC on linear axes, and on log-log axes (low FPRs)."""
    return _save(roc_figure(curves, null_band=null_band, title=title), path)


def roc_figure(
    curves: Mapping[str, RocCurve],
    *,
    null_band: tuple[float, float] | None = None,
    title: str = "Membership inference ROC",
) -> Figure:
    """The two-panel ROC figure; one legend for both panels, below them (a legend inside the
    axes hides the curves it names)."""
    if not curves:
        raise AttackInputError("no ROC curves to plot")
    fig, (lin, log) = plt.subplots(1, 2, figsize=(10, 4.5))
    for name, c in curves.items():
        fpr, tpr = np.asarray(c.fpr), np.asarray(c.tpr)
        (line,) = lin.plot(fpr, tpr, label=f"{name} (AUC {c.area:.3f})")
        log.plot(np.maximum(fpr, _LOG_FLOOR), np.maximum(tpr, _LOG_FLOOR), color=line.get_color())
    grid = np.linspace(_LOG_FLOOR, 1.0, 200)
    lin.plot([0, 1], [0, 1], "k--", lw=0.8, label="random")
    log.plot(grid, grid, "k--", lw=0.8)
    lin.set(xlabel="false positive rate", ylabel="true positive rate", title="linear axes")
    log.set(
        xscale="log",
        yscale="log",
        xlabel="false positive rate",
        ylabel="true positive rate",
        title="log-log axes",
    )
    log.set_xlim(_LOG_FLOOR, 1.0)
    log.set_ylim(_LOG_FLOOR, 1.0)
    if null_band is not None:
        lin.set_title(f"linear axes (null AUC band [{null_band[0]:.3f}, {null_band[1]:.3f}])")
    fig.suptitle(title)
    handles, labels = lin.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8)
    return fig


def _hwc(img: np.ndarray) -> np.ndarray:
    # (C, H, W) -> (H, W, C), greyscale squeezed for imshow.
    x = img.transpose(1, 2, 0)
    return x[..., 0] if x.shape[-1] == 1 else x


def plot_reconstruction_grid(
    originals: ArrayLike,
    reconstructions: Mapping[str, ArrayLike],
    path: str | Path,
    *,
    baselines: Mapping[str, ArrayLike] | None = None,
    layout: Layout = "NCHW",
    max_rows: int = 8,
) -> Path:
    """Write a PNG grid: one row per original, columns original | reconstructions | baselines."""
    orig = as_nchw(originals, layout)[:max_rows]
    cols: list[tuple[str, np.ndarray]] = [("original", orig)]
    for group in (reconstructions, baselines or {}):
        for name, imgs in group.items():
            arr = as_nchw(imgs, layout)[: orig.shape[0]]
            if arr.shape != orig.shape:
                raise AttackInputError(f"column {name!r} has shape {arr.shape}, want {orig.shape}")
            cols.append((name, arr))
    n_rows, n_cols = orig.shape[0], len(cols)
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(1.6 * n_cols, 1.6 * n_rows + 0.4), squeeze=False
    )
    cmap = "gray" if orig.shape[1] == 1 else None
    for j, (name, arr) in enumerate(cols):
        for i in range(n_rows):
            ax = axes[i][j]
            ax.imshow(_hwc(arr[i]), cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(name, fontsize=8)
    return _save(fig, path)


def _save(fig: Figure, path: str | Path) -> Path:
    """Lay out, write a 100-dpi PNG to ``path`` (creating its folder) and free the figure."""
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # "tight" keeps a legend placed outside the axes inside the PNG.
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out
