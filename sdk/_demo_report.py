"""What ``fedmor demo`` prints and plots from its metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_run", "results_table", "style_table"]


def results_table(stage_c: dict[str, Any]) -> str:
    """Stage C's accuracies as a fixed-width table: one row per policy."""
    cats = list(next(iter(stage_c["results"].values()))["per_category"])
    head = f"{'policy':<14}" + "".join(f"{c[:9]:>10}" for c in cats) + f"{'ID avg':>10}{'HO avg':>10}"
    lines = [head, "-" * len(head)]
    for name, r in stage_c["results"].items():
        id_avg = float("nan") if r["id_avg"] is None else r["id_avg"]
        vals = [r["per_category"][c] for c in cats] + [id_avg, r["heldout_avg"]]
        lines.append(f"{name:<14}" + "".join(f"{v:>10.3f}" for v in vals))
    for name, r in stage_c["results"].items():
        if r.get("heldout_expected") is not None:
            id_exp = float("nan") if r["id_expected"] is None else r["id_expected"]
            lines.append(f"{name:<14} expected (P(right option), no sampling noise): "
                         f"ID {id_exp:.3f}, held-out {r['heldout_expected']:.3f}")
    return "\n".join(lines)


def style_table(stage_c: dict[str, Any]) -> str:
    """Per style client: win rate against the rejected answer and mean held-out judge score."""
    clients = list(next(iter(stage_c["results"].values()))["style"])
    head = f"{'policy':<14}" + "".join(f"{c[:8] + ' win':>14}{'score':>8}" for c in clients)
    lines = [head, "-" * len(head)]
    for name, r in stage_c["results"].items():
        lines.append(f"{name:<14}" + "".join(
            f"{r['style'][c]['win_rate']:>14.3f}{r['style'][c]['mean_score']:>8.2f}"
            for c in clients))
    return "\n".join(lines)


def plot_run(metrics: dict[str, Any], out: Path) -> list[str]:
    """reward/loss over GRPO steps, routing accuracy over rounds, bytes per stage (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    rounds = metrics["stage_b"]["rounds"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(range(1, len(rounds) + 1), [r["routing_accuracy"] for r in rounds], marker="o")
    ax.set(xlabel="secure-aggregation round", ylabel="routing accuracy (eval pairs)",
           ylim=(0, 1), title="Stage B: federated router")
    fig.tight_layout()
    fig.savefig(out / "router_accuracy.png")
    written.append("router_accuracy.png")
    stage_c = metrics.get("stage_c")
    if stage_c:
        steps = stage_c["steps"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.5))
        a1.plot([e["step"] for e in steps], [e["reward"] for e in steps], label="mean reward")
        a1.plot([e["step"] for e in steps], [e["loss"] for e in steps], label="GRPO loss")
        a1.set(xlabel="GRPO step", title="Stage C: routed reward (clients over REST)")
        a1.legend()
        last = steps[-1]["step"] if steps else 1
        for key, label in (("id_avg", "ID avg"), ("heldout_avg", "held-out avg")):
            ys = [r[key] for r in stage_c["results"].values()]
            a2.plot([0, last], ys, marker="o", label=label)
        a2.set(xlabel="GRPO step", ylabel="best-of-3 accuracy", ylim=(0, 1),
               title="base (step 0) vs aligned")
        a2.legend()
        fig.tight_layout()
        fig.savefig(out / "alignment.png")
        written.append("alignment.png")
    comm = metrics["communication_bytes"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(list(comm), [v / 1e6 for v in comm.values()])
    ax.set(ylabel="MB", title="Communication per stage")
    fig.tight_layout()
    fig.savefig(out / "communication.png")
    written.append("communication.png")
    plt.close("all")
    return written
