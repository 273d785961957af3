"""End to end: an imported multiple-choice set trains a reward model above chance with the real
``fedmor rm train`` command, judged on the import's own eval split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _importkit import write_mc_jsonl

import sdk.cli
from sdk.data import load_pairs, load_queries


def test_imported_mc_set_trains_a_reward_model_above_chance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_mc_jsonl(tmp_path / "src", 200)
    out = tmp_path / "fill"
    assert sdk.cli.main(["data", "import", "mc", str(source), "--out", str(out),
                         "--eval-fraction", "0.2", "--wrong", "one"]) == 0
    capsys.readouterr()
    evals = load_pairs(out / "eval")
    assert len(evals) >= 20 and len(load_queries(out / "eval")) == len(evals)
    assert sdk.cli.main(["rm", "train", "--data", str(out / "train"), "--eval", str(out / "eval"),
                         "--arch", "qwen2_vl", "--out", str(tmp_path / "rm"), "--steps", "20",
                         "--batch-size", "16"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Chance is 0.5; with ~40 eval pairs a chance model reaches 0.75 with probability < 0.001.
    assert summary["eval_accuracy"] >= 0.75, summary
