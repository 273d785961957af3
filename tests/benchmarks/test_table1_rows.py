"""Table 1's resumable row log (examples/benchmarks/_table1_rows.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
from _table1_rows import RowLog, SettingsMismatch

SETTINGS = {"quick": False, "invalid_choice_reward": -1.6, "style": True}


def test_resume_reuses_saved_rows(tmp_path: Path) -> None:
    log = RowLog(tmp_path, SETTINGS, resume=False)
    log.add(0, "mor", {"id": 0.9})
    log.add(0, "base", {"id": 0.8})
    again = RowLog(tmp_path, SETTINGS, resume=True)
    assert len(again) == 2
    assert again.get(0, "mor") == {"id": 0.9}
    assert again.get(1, "mor") is None
    assert again.get_or_run(0, "mor", lambda: {"id": 0.0}) == {"id": 0.9}  # not run again
    assert again.get_or_run(1, "mor", lambda: {"id": 0.95}) == {"id": 0.95}
    lines = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(x["seed"], x["method"]) for x in lines] == [(0, "mor"), (0, "base"), (1, "mor")]


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    RowLog(tmp_path, SETTINGS, resume=False).add(0, "mor", {"id": 0.9})
    with pytest.raises(SettingsMismatch, match="invalid_choice_reward"):
        RowLog(tmp_path, {**SETTINGS, "invalid_choice_reward": -3.0}, resume=True)
    (tmp_path / "settings.json").unlink()
    with pytest.raises(SettingsMismatch, match="missing"):
        RowLog(tmp_path, SETTINGS, resume=True)


def test_resume_takes_a_setting_added_since_at_its_default(tmp_path: Path) -> None:
    RowLog(tmp_path, SETTINGS, resume=False).add(0, "mor", {"id": 0.9})
    added = {**SETTINGS, "lora_vision": False}
    again = RowLog(tmp_path, added, resume=True, defaults={"lora_vision": False})
    assert again.get(0, "mor") == {"id": 0.9}
    RowLog(tmp_path, SETTINGS, resume=False).add(0, "mor", {"id": 0.9})
    with pytest.raises(SettingsMismatch, match="lora_vision"):  # not the default: other rows
        RowLog(tmp_path, {**SETTINGS, "lora_vision": True}, resume=True,
               defaults={"lora_vision": False})


def test_fresh_run_keeps_earlier_rows_aside(tmp_path: Path) -> None:
    RowLog(tmp_path, SETTINGS, resume=False).add(0, "mor", {"id": 0.9})
    fresh = RowLog(tmp_path, {**SETTINGS, "style": False}, resume=False)
    assert len(fresh) == 0 and fresh.get(0, "mor") is None
    kept = list(tmp_path.glob("rows-*.jsonl"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["id"] == 0.9


def test_resume_drops_a_row_cut_short_by_a_stop(tmp_path: Path) -> None:
    log = RowLog(tmp_path, SETTINGS, resume=False)
    log.add(0, "mor", {"id": 0.9})
    with (tmp_path / "rows.jsonl").open("a") as f:
        f.write('{"seed": 0, "method": "avg_rm", "id": 0.')  # killed mid-write
    again = RowLog(tmp_path, SETTINGS, resume=True)
    assert again.get(0, "mor") == {"id": 0.9} and again.get(0, "avg_rm") is None
    again.add(0, "avg_rm", {"id": 0.8})
    lines = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [x["method"] for x in lines] == ["mor", "avg_rm"]


def test_resume_refuses_a_corrupt_row_in_the_middle(tmp_path: Path) -> None:
    RowLog(tmp_path, SETTINGS, resume=False).add(0, "mor", {"id": 0.9})
    text = (tmp_path / "rows.jsonl").read_text()
    (tmp_path / "rows.jsonl").write_text("not json\n" + text)
    with pytest.raises(ValueError, match=r"rows\.jsonl:1"):
        RowLog(tmp_path, SETTINGS, resume=True)
