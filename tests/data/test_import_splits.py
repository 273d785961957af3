"""Which split an import writes: an eval-only import of a held-out set, a train-only import whose
``eval/`` is written empty, plain errors for bad options, and leaks across two imports."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
from _importkit import color_image

import sdk.cli
from sdk.data import ImportConfig, import_data, load_pairs


def _source(root: Path, count: int, seed: int = 0, first: int = 0) -> Path:
    rng = random.Random(seed)
    (root / "img").mkdir(parents=True)
    with (root / "export.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "image", "prompt", "chosen", "rejected"])
        writer.writeheader()
        for index in range(first, first + count):
            color_image(rng, "red").save(root / "img" / f"{index}.png")
            writer.writerow({"id": f"x{index}", "image": f"img/{index}.png", "prompt": "p?",
                             "chosen": "yes", "rejected": "no"})
    return root / "export.csv"


def test_split_eval_imports_everything_as_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    source = _source(tmp_path / "src", 12)
    for flags, out in ((["--split", "eval"], "a"), (["--eval-fraction", "1"], "b")):
        assert sdk.cli.main(["data", "import", "csv", str(source), "--out",
                             str(tmp_path / out), *flags]) == 0
        assert len(load_pairs(tmp_path / out / "eval")) == 12
        assert (tmp_path / out / "train" / "pairs.jsonl").read_text() == ""
        summary = json.loads((tmp_path / out / "import.json").read_text())
        assert summary["pairs"] == {"eval": {"imported": 12}, "train": {}}
    assert "train: 0 pairs, 0 images" in capsys.readouterr().out


def test_eval_fraction_zero_still_writes_an_empty_eval_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _source(tmp_path / "src", 5)
    import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.0), progress=False)
    assert len(load_pairs(tmp_path / "out" / "train")) == 5
    assert (tmp_path / "out" / "eval" / "pairs.jsonl").read_text() == ""
    assert (tmp_path / "out" / "eval" / "images").is_dir()
    assert sdk.cli.main(["data", "check", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"{tmp_path / 'out' / 'eval'}: empty" in printed and "5 records ok" in printed


@pytest.mark.parametrize(("flags", "expected"), [
    (["--eval-fraction", "1.5"], "fedmor: error: --eval-fraction 1.5: input should be less than "
                                 "or equal to 1\n"),
    (["--max-image-side", "4"], "fedmor: error: --max-image-side 4: input should be greater "
                                "than or equal to 8\n"),
])
def test_bad_options_are_plain_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         flags: list[str], expected: str) -> None:
    source = _source(tmp_path / "src", 1)
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(tmp_path / "o"),
                         *flags]) == 1
    error = capsys.readouterr().err
    assert error == expected and "type=" not in error and "pydantic" not in error


def test_check_sees_a_leak_across_a_train_import_and_an_eval_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = _source(tmp_path / "mine", 6)
    held = _source(tmp_path / "held", 3, first=6)  # the same seed: mine's first three images
    data = tmp_path / "data"
    for source, name, split in ((train, "mine", "train"), (held, "held", "eval")):
        assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(data / name),
                             "--split", split]) == 0
    capsys.readouterr()
    assert sdk.cli.main(["data", "check", str(data)]) == 0
    printed = capsys.readouterr().out
    assert "warning: 3 images appear in both a train and an eval folder" in printed
