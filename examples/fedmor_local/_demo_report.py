"""What ``fedmor demo`` prints and plots from its metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.curves import plot_trace

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["alignment_figure", "change_summary", "plot_run", "results_table", "style_table"]


# (title, per-category key, ID average key, held-out average key) of each block, in print order:
# the noise-free figure first, since 32 queries' best-of-3 moves by sampling luck alone.
_BLOCKS = (("expected accuracy: P(right option), no sampling noise", "expected", "id_expected",
            "heldout_expected"),
           ("best-of-3 accuracy: 3 answers sampled at temperature 1, any right", "per_category",
            "id_avg", "heldout_avg"))


def results_table(stage_c: dict[str, Any]) -> str:
    """Stage C's accuracies as fixed-width tables, expected accuracy first and best-of-3
    second: one row per policy, one column per category."""
    rows = stage_c["results"]
    cats = list(next(iter(rows.values()))["per_category"])
    head = f"{'policy':<14}" + "".join(f"{c[:9]:>10}" for c in cats) + f"{'ID avg':>10}{'HO avg':>10}"
    lines = []
    for title, per_key, id_key, ho_key in _BLOCKS:
        lines += [title, head, "-" * len(head)]
        for name, r in rows.items():
            vals = [r[per_key][c] for c in cats] + [_nan(r[id_key]), _nan(r[ho_key])]
            lines.append(f"{name:<14}" + "".join(f"{v:>10.3f}" for v in vals))
    return "\n".join(lines)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _change(before: float, after: float) -> str:
    """``from 0.710 to 0.760 (+5.0 points)``, or that it did not change (to 0.1 points)."""
    points = round(100 * (after - before), 1)
    if points == 0:
        return f"did not change ({after:.3f})"
    verb = "rose" if points > 0 else "fell"
    return f"{verb} from {before:.3f} to {after:.3f} ({points:+.1f} points)"


def change_summary(stage_c: dict[str, Any]) -> str:
    """One sentence on what alignment changed: expected accuracy on the members' task
    categories and on the held-out ones, and each style client's win rate (computed, base
    against the aligned policy)."""
    (base_name, base), (name, aligned) = list(stage_c["results"].items())[:2]
    parts = []
    if base["id_expected"] is not None:
        cats = ", ".join(stage_c["id_categories"])
        parts.append(f"expected accuracy on the members' task categories ({cats}) "
                     + _change(base["id_expected"], aligned["id_expected"]))
    parts.append("on the held-out categories it "
                 + _change(base["heldout_expected"], aligned["heldout_expected"]))
    for client, score in aligned["style"].items():
        parts.append(f"the {client} win rate " + _change(base["style"][client]["win_rate"],
                                                          score["win_rate"]))
    return f"{name} against the {base_name} policy: " + "; ".join(parts)


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


def alignment_figure(stage_c: dict[str, Any]) -> Figure:
    """The headline of stage C as the summary line states it: left, the noise-free expected
    accuracy (P(right option)) per category, base beside aligned, the members' task categories
    first; right, the routed reward per GRPO step, raw under its moving average (a step's mean
    over a few completions is noisy, so the raw trace alone hides the trend)."""
    import matplotlib.pyplot as plt

    (base_name, base), (name, aligned) = list(stage_c["results"].items())[:2]
    cats = list(base["expected"])
    ids = set(stage_c["id_categories"])
    cats.sort(key=lambda c: c not in ids)  # the members' tasks first (a stable sort)
    fig, (bars, curve) = plt.subplots(1, 2, figsize=(11, 3.8))
    xs = list(range(len(cats)))
    for offset, (label, row, colour) in ((-0.2, (base_name, base, "#8c959f")),
                                        (0.2, (name, aligned, "#0550ae"))):
        bars.bar([x + offset for x in xs], [row["expected"][c] for c in cats], width=0.4,
                 color=colour, label=label)
    bars.set_xticks(xs, [c if c in ids else f"{c}\n(held out)" for c in cats],
                    fontsize="small")
    title = "expected accuracy: P(right option)"
    if base["id_expected"] is not None:
        points = 100 * (aligned["id_expected"] - base["id_expected"])
        title += (f"\nmembers' tasks {base['id_expected']:.3f} -> "
                  f"{aligned['id_expected']:.3f} ({points:+.1f} points)")
    bars.set(ylabel="expected accuracy", ylim=(0, 1), title=title)
    bars.legend(fontsize="small")
    steps = [e for e in stage_c["steps"] if e.get("reward") is not None]
    plot_trace(curve, [e["step"] for e in steps], [e["reward"] for e in steps],
               "mean routed reward")
    curve.set(xlabel="GRPO step", ylabel="reward (members' normalized scores)",
              title="Stage C: routed reward (clients over REST)")
    curve.legend(fontsize="small")
    fig.tight_layout()
    return fig


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
        fig = alignment_figure(stage_c)
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
