"""Smaller import rules: missing cells, rating aspects in any case, per-kind help, skipping
refused records, and the border mask."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _importkit import color_image
from PIL import Image

import sdk.cli
from sdk.data import ImportConfig, PreferenceDataError, import_data, load_pairs


def _csv(root: Path, rows: list[dict[str, str]]) -> Path:
    (root / "img").mkdir(parents=True, exist_ok=True)
    color_image(random.Random(0), "red").save(root / "img" / "a.png")
    with (root / "export.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return root / "export.csv"


def _row(index: int, **values: str) -> dict[str, str]:
    return {"id": f"c{index}", "image": "img/a.png", "prompt": f"Question {index}?",
            "chosen": "yes", "rejected": "no", "category": "derm", **values}


@pytest.mark.parametrize("cell", ["NaN", "nan", " ", ""])
def test_a_nan_or_empty_cell_is_a_missing_value_not_text(tmp_path: Path, cell: str) -> None:
    source = _csv(tmp_path, [_row(0), _row(1, chosen=cell)])
    with pytest.raises(PreferenceDataError, match=r"export.csv:3: missing field 'chosen'"):
        import_data("csv", source, tmp_path / "out", progress=False)
    # An optional field left NaN takes its default: the category, a generated id.
    source = _csv(tmp_path, [_row(0, category=cell, id=cell)])
    import_data("csv", source, tmp_path / "o2", ImportConfig(eval_fraction=0.0), progress=False)
    (pair,) = load_pairs(tmp_path / "o2" / "train")
    assert pair.category == "imported" and pair.id.startswith("r")


def test_a_float_nan_cell_is_missing_too(tmp_path: Path) -> None:
    color_image(random.Random(0), "red").save(tmp_path / "a.png")
    pq.write_table(pa.table({"images": ["a.png"], "prompt": ["p"], "chosen": [math.nan],
                             "rejected": ["r"]}), tmp_path / "nan.parquet")
    with pytest.raises(PreferenceDataError, match=r"nan.parquet:1: missing field 'chosen'"):
        import_data("hf", tmp_path / "nan.parquet", tmp_path / "out", progress=False)


def _scores(root: Path) -> Path:
    color_image(random.Random(0), "blue").save(root / "a.png")
    responses = [{"text": "good", "ratings": {"helpfulness": {"Rating": "5"}, "ethics": 5}},
                 {"text": "bad", "ratings": {"helpfulness": {"Rating": "1"}, "ethics": "NaN"}}]
    (root / "s.jsonl").write_text(json.dumps({"image": "a.png", "prompt": "Describe.",
                                              "responses": responses}) + "\n")
    return root / "s.jsonl"


def test_aspects_match_in_any_case_and_an_unknown_one_is_named(tmp_path: Path) -> None:
    source = _scores(tmp_path)
    config = ImportConfig(aspects=("Helpfulness",), eval_fraction=0.0)
    import_data("scores", source, tmp_path / "a", config, progress=False)
    assert [(p.chosen, p.rejected) for p in load_pairs(tmp_path / "a" / "train")] == [
        ("good", "bad")]
    # A NaN rating is no rating: with Ethics, the second response is dropped and no pair is left.
    with pytest.raises(ValueError, match="the import yields no pairs"):
        import_data("scores", source, tmp_path / "b",
                    config.model_copy(update={"aspects": ("Helpfulness", "ETHICS")}),
                    progress=False)
    with pytest.raises(PreferenceDataError, match=r"s.jsonl:1: response 1: unknown aspect\(s\) "
                       r"\['Honesty'\]; its aspects are \['ethics', 'helpfulness'\]"):
        import_data("scores", source, tmp_path / "c",
                    config.model_copy(update={"aspects": ("Honesty",)}), progress=False)


def test_each_kind_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    helps = {}
    for kind in ("csv", "scores", "mc", "hf"):
        with pytest.raises(SystemExit):
            sdk.cli.main(["data", "import", kind, "--help"])
        helps[kind] = capsys.readouterr().out
    assert "--aspects" in helps["scores"] and "--min-margin" in helps["scores"]
    assert "--wrong" in helps["mc"] and "--aspects" not in helps["mc"]
    assert "--aspects" not in helps["csv"] and "--wrong" not in helps["csv"]
    assert "--skip-bad" in helps["csv"] and "image (image)" in helps["csv"]
    assert "question (question, Question)" in helps["mc"]


def test_skip_bad_skips_refused_records_with_a_count_and_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _csv(tmp_path / "src", [_row(0), _row(1, image="img/absent.png"), _row(2),
                                     _row(3, image="../outside.png"), _row(4)])
    argv = ["data", "import", "csv", str(source), "--out", str(tmp_path / "out")]
    assert sdk.cli.main(argv) == 1  # by default the first refused record stops the import
    assert "export.csv:3: image 'img/absent.png' not found" in capsys.readouterr().err
    assert sdk.cli.main([*argv, "--skip-bad", "--split", "train"]) == 0
    printed = capsys.readouterr().out
    assert "dropped 2: record refused (--skip-bad)" in printed
    summary = json.loads((tmp_path / "out" / "import.json").read_text())
    assert summary["dropped"] == {"record refused (--skip-bad)": 2}
    assert [s.split(": ", 1)[0] for s in summary["skipped"]] == ["export.csv:3", "export.csv:5"]
    assert "not found" in summary["skipped"][0] and "escapes" in summary["skipped"][1]
    assert [p.id for p in load_pairs(tmp_path / "out" / "train")] == ["c0", "c2", "c4"]


def test_mask_border_blacks_out_the_edges(tmp_path: Path) -> None:
    Image.new("RGB", (20, 12), (255, 255, 255)).save(tmp_path / "w.png")
    source = _csv(tmp_path, [_row(0, image="w.png")])
    import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.0, mask_border=3),
                progress=False)
    (pair,) = load_pairs(tmp_path / "out" / "train")
    pixels = np.asarray(pair.image)[..., 0]
    expected = np.zeros((12, 20), dtype=np.uint8)
    expected[3:-3, 3:-3] = 255
    assert np.array_equal(pixels, expected)
