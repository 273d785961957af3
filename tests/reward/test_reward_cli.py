"""``fedmor rm train / eval / score`` on real synthesized files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sdk.data import SynthConfig, synthesize
from sdk.reward._cli import register


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedmor")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_rm_train_eval_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=12, eval_pairs=6,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    split = tmp_path / "data" / "clients" / "detail"
    ckpt = tmp_path / "ckpt"
    assert _run(["rm", "train", "--data", str(split / "train"), "--eval", str(split / "eval"),
                 "--arch", "qwen2_vl", "--out", str(ckpt), "--steps", "2",
                 "--batch-size", "4", "--lora", "--eval-every", "1", "--patience", "5"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["architecture"] == "qwen2_vl" and summary["steps"] == 2
    assert 0.0 <= summary["eval_accuracy"] <= 1.0 and summary["best_step"] in (1, 2)
    assert (ckpt / "reward_head.safetensors").is_file() and (ckpt / "normalizer.json").is_file()
    assert (ckpt / "curve.csv").read_text().count("\n") == 3  # header and two steps
    # The tiny random-init backbone is named a trial backbone, once, with the way out.
    assert captured.err.count("trial backbone") == 1 and "--base DIR" in captured.err

    assert _run(["rm", "eval", str(ckpt), "--data", str(split / "eval")]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pairwise_accuracy"][str(split / "eval")] == summary["eval_accuracy"]

    image = next((split / "eval" / "images").iterdir())
    assert _run(["rm", "score", str(ckpt), "--image", str(image), "--prompt", "Describe it.",
                 "--response", "A red circle."]) == 0
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert abs(scored["score"]) <= scored["clip"]


def test_rm_train_dp_reports_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthesize(SynthConfig(clients=("safety",), heldout=(), train_pairs=16, eval_pairs=4,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    split = tmp_path / "data" / "clients" / "safety"
    assert _run(["rm", "train", "--data", str(split / "train"), "--arch", "llava_onevision",
                 "--out", str(tmp_path / "ckpt"), "--steps", "2", "--batch-size", "4",
                 "--lora", "--dp-epsilon", "5"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 < summary["spent_epsilon"] <= 5.0
    assert summary["eval_accuracy"] is None
