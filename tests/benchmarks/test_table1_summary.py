"""Table 1's summary and headline (examples/benchmarks/_table1_summary.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
from _table1_summary import ROW_COLUMNS, headline, print_table, summarize


def _row(id_: float, heldout: float, *, detail: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {c: 0.5 for c in ROW_COLUMNS}
    row.update(id=id_, heldout=heldout, id_expected=id_ - 0.2, id_expected_bo3=id_ - 0.02,
               heldout_expected_bo3=heldout - 0.01)
    if detail is not None:
        row.update(style_win=detail / 2 + 0.5,
                   style={"detail": {"win_rate": detail}, "safety": {"win_rate": 1.0}})
    return row


def test_the_best_baseline_excludes_mor_and_its_ablations() -> None:
    rows = {"base": [_row(0.90, 0.82)] * 2,
            "mor": [_row(0.95, 0.80), _row(0.97, 0.80)],
            "mor_no_online": [_row(0.99, 0.90)] * 2,  # an ablation, never "the best baseline"
            "plurallm_alpha": [_row(0.92, 0.79)] * 2,
            "best_single_safety": [_row(0.91, 0.83)] * 2}
    table = summarize(rows)
    assert table["mor"]["id"] == pytest.approx({"mean": 0.96, "std": 0.01})
    h = headline(table, style=False, overhead_ratio=0.9712, seeds=2)
    assert (h["best_baseline_name"], h["best_baseline_id_avg"]) == ("plurallm_alpha", 0.92)
    assert (h["best_baseline_heldout_name"], h["best_baseline_heldout_avg"]) == (
        "best_single_safety", 0.83)
    assert h["mor_heldout_expected_bo3"] == pytest.approx(0.79)
    assert h["best_baseline_heldout_expected_bo3"] == pytest.approx(0.82)
    assert h["best_baseline_id_expected"] == pytest.approx(0.72)
    assert h["mor_id_expected_bo3"] == pytest.approx(0.94)
    assert h["best_baseline_id_expected_bo3"] == pytest.approx(0.90)
    assert h["no_online_id_avg"] == 0.99
    assert h["no_norm_id_avg"] is None  # left out by --methods
    assert h["mor_style_win"] is None and h["routed_step_overhead_ratio"] == 0.971


def test_style_columns_come_from_each_rows_style_results() -> None:
    rows = {"base": [_row(0.9, 0.8, detail=0.4), _row(0.9, 0.8, detail=0.6)],
            "avg_rm": [_row(0.9, 0.8, detail=0.7)]}
    table = summarize(rows, ("detail", "safety"))
    assert table["base"]["detail_win"] == pytest.approx({"mean": 0.5, "std": 0.1})
    assert table["avg_rm"]["safety_win"]["mean"] == 1.0
    h = headline(table, style=True, overhead_ratio=None, seeds=2)
    assert h["best_baseline_style_win"] == pytest.approx(0.85)
    assert h["mor_id_avg"] is None and h["routed_step_overhead_ratio"] is None


def test_the_printed_table_has_a_line_per_method() -> None:
    lines: list[str] = []
    print_table(summarize({"base": [_row(0.9, 0.8)], "mor": [_row(0.961, 0.804)]}),
                lines.append, style=False)
    assert "ID E[bo3]" in lines[0] and "held-out E[bo3]" in lines[0]
    assert "style win" not in lines[0]
    assert lines[2].startswith("mor") and "0.961±0.000" in lines[2] and "0.941±0.000" in lines[2]
    assert "0.794±0.000" in lines[2]
