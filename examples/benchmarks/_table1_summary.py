"""Table 1's summary of the saved rows: mean ± std per method and column over the seeds, the
printed table, and the headline that compares MoR with the best baseline per column."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ROW_COLUMNS", "Table", "headline", "print_table", "summarize"]

# The per-row numbers every table column is made from (style columns are added when on).
ROW_COLUMNS = ("id", "heldout", "id_greedy", "id_sampled", "id_expected", "heldout_expected",
               "id_expected_bo3", "heldout_expected_bo3")
# MoR and its ablations; every other row but the base is a baseline.
_NOT_BASELINES = ("base", "mor", "mor_no_online", "mor_no_norm")
_SHOWN = (("id", "ID best-of-3"), ("heldout", "held-out"), ("id_expected", "ID expected"),
          ("heldout_expected", "held-out"), ("id_expected_bo3", "ID E[bo3]"),
          ("heldout_expected_bo3", "held-out E[bo3]"))

Table = dict[str, dict[str, dict[str, float]]]  # method -> column -> {"mean", "std"}


def _mean_std(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0}


def summarize(rows: dict[str, list[dict[str, Any]]], style_names: Sequence[str] = ()) -> Table:
    """Mean ± std over the seeds of every column. With style clients, each row also gets a
    ``<client>_win`` column from its ``style`` results (added to the rows in place)."""
    columns = list(ROW_COLUMNS)
    if style_names:
        columns += ["style_win", *(f"{c}_win" for c in style_names)]
        for rs in rows.values():
            for r in rs:
                r.update({f"{c}_win": v["win_rate"] for c, v in r["style"].items()})
    return {name: {col: _mean_std([r[col] for r in rs]) for col in columns}
            for name, rs in rows.items()}


def print_table(table: Table, say: Callable[[str], None], *, style: bool) -> None:
    """One line per method: the columns a reader compares first."""
    shown = [*_SHOWN, *((("style_win", "style win"),) if style else ())]
    say(f"{'method':<28}" + "".join(f"{title:>16}" for _, title in shown))
    for name, cols in table.items():
        say(f"{name:<28}" + "".join(f"{cols[c]['mean']:>9.3f}±{cols[c]['std']:.3f}"
                                    for c, _ in shown))


def headline(table: Table, *, style: bool, overhead_ratio: float | None,
             seeds: int) -> dict[str, Any]:
    """The issue's headline keys. The best baseline is chosen per column; a key is None when
    ``--methods`` left its row out."""
    baselines = [n for n in table if n not in _NOT_BASELINES]
    best = max(baselines, key=lambda n: table[n]["id"]["mean"], default=None)
    best_heldout = max(baselines, key=lambda n: table[n]["heldout"]["mean"], default=None)

    def mean(name: str | None, col: str = "id") -> float | None:
        return table[name][col]["mean"] if name in table else None

    def best_of(col: str) -> float | None:
        return max((table[n][col]["mean"] for n in baselines), default=None)

    return {
        "base_id_avg": mean("base"),
        "mor_id_avg": mean("mor"),
        "best_baseline_id_avg": mean(best),
        "best_baseline_name": best,
        "mor_heldout_avg": mean("mor", "heldout"),
        "best_baseline_heldout_avg": mean(best_heldout, "heldout"),
        "best_baseline_heldout_name": best_heldout,
        "no_online_id_avg": mean("mor_no_online"),
        "no_norm_id_avg": mean("mor_no_norm"),
        # The same comparison without sampling noise: mean P(right option) (option_probabilities).
        "base_id_expected": mean("base", "id_expected"),
        "mor_id_expected": mean("mor", "id_expected"),
        "best_baseline_id_expected": best_of("id_expected"),
        # Best-of-3 as an expectation over the samples (1 - (1 - P(right))^3 per query): the
        # targets' comparisons without the sampling noise of three draws.
        "base_id_expected_bo3": mean("base", "id_expected_bo3"),
        "mor_id_expected_bo3": mean("mor", "id_expected_bo3"),
        "best_baseline_id_expected_bo3": best_of("id_expected_bo3"),
        "mor_heldout_expected_bo3": mean("mor", "heldout_expected_bo3"),
        "best_baseline_heldout_expected_bo3": best_of("heldout_expected_bo3"),
        "base_style_win": mean("base", "style_win") if style else None,
        "mor_style_win": mean("mor", "style_win") if style else None,
        "best_baseline_style_win": best_of("style_win") if style else None,
        "routed_step_overhead_ratio": (round(overhead_ratio, 3)
                                       if overhead_ratio is not None else None),
        "seeds": seeds,
    }
