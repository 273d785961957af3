"""The plots ``align`` writes beside its ``metrics.json``: reward, KL and seconds per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None)
        ax.set(xlabel="GRPO step", ylabel=label, title=f"{metrics.get('selection', 'GRPO')}: "
               f"{label}")
        fig.tight_layout()
        fig.savefig(out_dir / name)
        plt.close(fig)
        written.append(name)
    return written
