"""The plots ``align`` writes beside its ``metrics.json``: reward, KL and seconds per step, each
the raw per-step trace under its moving average (one step's reward is a handful of samples)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sdk.curves import plot_trace

__all__ = ["plot_alignment", "step_series"]

# (file name, y label, where the value comes from): trl's log per step, or align's step clock.
_PLOTS = (("reward.png", "mean reward of the step's completions", "reward"),
          ("kl.png", "KL to the reference policy", "kl"),
          ("seconds_per_step.png", "seconds per step", "seconds"))


def step_series(log_history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int],
                                                                              list[float]]:
    """``(steps, values)`` of one key of trl's per-step log (entries without it skipped)."""
    entries = [e for e in log_history if key in e and "step" in e]
    return [int(e["step"]) for e in entries], [float(e[key]) for e in entries]


def plot_alignment(metrics: Mapping[str, Any], out_dir: Path) -> list[str]:
    """One PNG per quantity in ``out_dir`` (Agg backend, no display); returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    times = metrics.get("step_seconds", [])
    written = []
    for name, label, key in _PLOTS:
        if key == "seconds":
            xs, ys = [t["step"] for t in times], [t["seconds"] for t in times]
        else:
            xs, ys = step_series(metrics["log_history"], key)
        fig, ax = plt.subplots(figsize=(5, 3.5))
        plot_trace(ax, xs, ys, label.split(" of ")[0])
        ax.set(xlabel="GRPO step", ylabel=label, title=f"{metrics.get('selection', 'GRPO')}: "
               f"{label}")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out_dir / name)
        plt.close(fig)
        written.append(name)
    return written
