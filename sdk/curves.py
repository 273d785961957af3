"""Per-step training curves as a reader should see them: a noisy per-step trace beside its
trailing moving average (the alignment plots of ``fedmor align``, the demo and the server's
operator console all draw rewards this way)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["moving_average", "plot_trace"]


def default_window(n: int) -> int:
    """A window of about a tenth of ``n`` points, at least 1 and at most 50: wide enough to
    show the trend of a noisy trace, narrow enough to keep its turns."""
    return max(1, min(50, n // 10))


def moving_average(values: Sequence[float | None], window: int | None = None) -> np.ndarray:
    """At each point, the mean of the finite values among the last ``window`` points up to it
    (float64, same length as ``values``; NaN where that span holds none). Missing values
    (None, NaN) are skipped, not counted as zeros. ``window`` defaults to
    :func:`default_window`."""
    x = np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    w = default_window(len(x)) if window is None else window
    if w < 1:
        raise ValueError(f"a moving average needs a window of at least 1 point; got {w}")
    finite = np.isfinite(x)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, x, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - w, 0)
    n = counts[idx] - counts[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums[idx] - sums[lo]) / np.maximum(n, 1), np.nan)


def plot_trace(ax: Axes, steps: Sequence[float], values: Sequence[float | None], label: str,
               *, window: int | None = None, colour: str = "C0") -> np.ndarray:
    """Draw ``values`` over ``steps`` on ``ax``: the raw trace thin and light, its moving
    average (labelled with the window) thick on top; returns the average."""
    average = moving_average(values, window)
    w = default_window(len(average)) if window is None else window
    raw = [np.nan if v is None else float(v) for v in values]
    ax.plot(steps, raw, color=colour, alpha=0.35, linewidth=0.9, label=f"{label}, per step")
    ax.plot(steps, average, color=colour, linewidth=2.2,
            label=f"{label}, moving average ({w} steps)")
    return average
