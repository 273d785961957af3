"""trl mapping through ``datasets``, the ``fedmor data`` commands, and the pinned public API."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _datakit import WriteDir, pair_record
from PIL import Image

import sdk.cli
import sdk.data
from sdk.data import PreferenceDataError, SynthManifest, load_pairs, to_hf_dataset


def test_to_hf_dataset_has_trl_preference_columns(bench: SynthManifest, tmp_path: Path) -> None:
    directory = bench.client_dir("position", "eval")
    dataset = to_hf_dataset(directory, cache_dir=tmp_path / "cache")
    pairs = load_pairs(directory)
    assert dataset.column_names == ["prompt", "chosen", "rejected", "images"]
    assert len(dataset) == len(pairs) == 12
    row = dataset[5]
    assert (row["prompt"], row["chosen"], row["rejected"]) == (
        pairs[5].prompt,
        pairs[5].chosen,
        pairs[5].rejected,
    )
    assert len(row["images"]) == 1 and isinstance(row["images"][0], Image.Image)
    assert np.array_equal(np.asarray(row["images"][0].convert("RGB")), np.asarray(pairs[5].image))


def test_to_hf_dataset_validates_first(write_dir: WriteDir, tmp_path: Path) -> None:
    directory = write_dir([pair_record(0), pair_record(1, rejected="")])
    with pytest.raises(PreferenceDataError, match=r"pairs.jsonl:2: field 'rejected' is empty"):
        to_hf_dataset(directory, cache_dir=tmp_path / "cache")


def test_cli_synth_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "synth"
    argv = [
        "data",
        "synth",
        "--out",
        str(out),
        "--seed",
        "9",
        "--train-pairs",
        "6",
        "--eval-pairs",
        "3",
        "--heldout-pairs",
        "2",
        "--warmup-queries",
        "1",
        "--policy-train-queries",
        "1",
        "--policy-eval-queries",
        "1",
        "--clients",
        "diagram",
        "safety",
        "--heldout",
        "count",
        "--image-size",
        "64",
    ]
    assert sdk.cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "clients/diagram/train: 6 pairs" in printed and "wrote" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 9 and manifest["clients"] == ["diagram", "safety"]
    assert manifest["heldout"] == ["count"] and manifest["config"]["image_size"] == 64
    assert load_pairs(out / "clients/safety/train")[0].image.size == (64, 64)
    assert sdk.cli.main(["data", "check", str(out)]) == 0
    assert "clients/diagram/train: 6 records ok" in capsys.readouterr().out


def test_cli_errors_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = ["data", "synth", "--out", str(tmp_path / "x"), "--clients", "diagram", "color"]
    assert sdk.cli.main(bad) == 1
    assert "held-out categories given to clients" in capsys.readouterr().err
    (tmp_path / "d/images").mkdir(parents=True)
    (tmp_path / "d/pairs.jsonl").write_text(json.dumps(pair_record(0)) + "\n")
    assert sdk.cli.main(["data", "check", str(tmp_path / "d")]) == 1
    assert "pairs.jsonl:1: image 'images/0.png' not found" in capsys.readouterr().err
