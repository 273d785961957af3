"""What a reward-model run keeps: the weights of its best evaluation, when to stop early, and
its learning curve in the run folder."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

__all__ = ["CURVE_CSV", "CURVE_PNG", "BestWeights", "write_curve"]

CURVE_CSV = "curve.csv"
"""The run folder's learning curve: one row per step (step, loss, lr, eval_accuracy)."""
CURVE_PNG = "curve.png"
"""The same curve drawn: the loss per step and the eval accuracy at each evaluation."""


class BestWeights:
    """The trainable tensors at the best evaluation so far (strictly higher accuracy wins, so a
    tie keeps the earlier step), copied to the CPU; and the evaluations since it, for early
    stopping.

    Only what training changes is copied: under LoRA the adapters and the head; fully
    fine-tuned, every weight (one more copy of the backbone in host memory).
    """

    def __init__(self, patience: int | None) -> None:
        self.patience = patience
        self.step: int | None = None
        self.accuracy: float | None = None
        self.since_best = 0
        self._state: dict[str, torch.Tensor] | None = None

    def offer(self, model: nn.Module, step: int, accuracy: float) -> bool:
        """Record an evaluation; keep the weights if it is the best so far (returns whether)."""
        if self.accuracy is not None and accuracy <= self.accuracy:
            self.since_best += 1
            return False
        self.step, self.accuracy, self.since_best = step, accuracy, 0
        self._state = {name: p.detach().to("cpu", copy=True)
                       for name, p in model.named_parameters() if p.requires_grad}
        return True

    @property
    def exhausted(self) -> bool:
        """Whether ``patience`` evaluations in a row brought no new best."""
        return self.patience is not None and self.since_best >= self.patience

    @torch.no_grad()
    def restore(self, model: nn.Module) -> None:
        """Put the kept weights back into ``model`` (no-op when nothing was evaluated)."""
        if self._state is None:
            return
        for name, p in model.named_parameters():
            if name in self._state:
                p.copy_(self._state[name].to(p.device))


def write_curve(out_dir: Path, history: Sequence[dict[str, float]], *,
                best_step: int | None) -> list[Path]:
    """Write ``curve.csv`` and ``curve.png`` (the best step marked) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / CURVE_CSV
    with table.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "loss", "lr", "eval_accuracy"])
        for h in history:
            accuracy = h.get("eval_accuracy")
            # repr: the shortest text that reads back as the same float
            writer.writerow([int(h["step"]), repr(float(h["loss"])), repr(float(h["lr"])),
                             "" if accuracy is None else repr(float(accuracy))])
    return [table, _plot(out_dir / CURVE_PNG, history, best_step)]


def _plot(path: Path, history: Sequence[dict[str, float]], best_step: int | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sdk.curves import plot_trace

    fig, loss_ax = plt.subplots(figsize=(7, 4))
    try:
        plot_trace(loss_ax, [h["step"] for h in history], [h["loss"] for h in history],
                   "Bradley-Terry loss")
        loss_ax.set_xlabel("step")
        loss_ax.set_ylabel("loss")
        evals = [(h["step"], h["eval_accuracy"]) for h in history if "eval_accuracy" in h]
        if evals:
            acc_ax = loss_ax.twinx()
            acc_ax.plot(*zip(*evals, strict=True), "o-", color="C1", label="eval accuracy")
            acc_ax.set_ylabel("eval pairwise accuracy")
            acc_ax.set_ylim(0.0, 1.0)
            if best_step is not None:
                acc_ax.axvline(best_step, color="C2", linestyle="--",
                               label=f"kept: step {best_step}")
            acc_ax.legend(loc="lower right")
        loss_ax.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path
