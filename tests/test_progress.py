"""Progress of long commands: step lines on stderr, results alone on stdout, and nothing but
results and errors in quiet mode (``fedmor --quiet`` anywhere on the line, or FEDMOR_QUIET=1)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from sdk.cli import build_parser, main
from sdk.data import SynthConfig, synthesize
from sdk.progress import QUIET_ENV, Steps, is_quiet, say, set_quiet


def test_rm_train_prints_steps_and_quiet_prints_only_the_result(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process (the CLI's own entry point, streams captured at the file descriptors): the
    # model code is loaded once, not once per command.
    monkeypatch.setenv(QUIET_ENV, "0")  # restored after the test, which turns quiet mode on
    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=8, eval_pairs=4,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    split = tmp_path / "data" / "clients" / "detail"
    argv = ["rm", "train", "--data", str(split / "train"), "--eval", str(split / "eval"),
            "--arch", "qwen2_vl", "--steps", "2", "--batch-size", "4"]
    capfd.readouterr()

    assert main([*argv, "--out", str(tmp_path / "loud")]) == 0
    loud = capfd.readouterr()
    assert "[rm qwen2_vl] step 1/2 loss" in loud.err
    assert "[rm qwen2_vl] step 2/2 loss" in loud.err and "eval_acc" in loud.err
    # stdout is the result alone: one JSON line, whatever the progress did.
    assert json.loads(loud.out)["steps"] == 2

    # The flag goes anywhere on the line (here after the command); the backbone is reused.
    assert main([*argv, "--backbone", str(tmp_path / "loud" / "backbone-init"),
                 "--out", str(tmp_path / "quiet"), "-q"]) == 0
    quiet = capfd.readouterr()
    assert "[rm " not in quiet.err + quiet.out
    assert json.loads(quiet.out)["steps"] == 2


def test_quiet_goes_before_or_after_the_command() -> None:
    # The parser `fedmor rm ...` runs with: main builds only the named command's.
    parser, argv = build_parser("rm"), ["rm", "train", "--data", "d", "--out", "o"]
    assert parser.parse_args(["--quiet", *argv]).quiet is True
    assert parser.parse_args([*argv, "--quiet"]).quiet is True
    assert getattr(parser.parse_args(argv), "quiet", False) is False


def test_errors_still_print_in_quiet_mode(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(QUIET_ENV, "0")  # restored after the test, which turns quiet mode on
    assert main(["--quiet", "rm", "train", "--data", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "out")]) == 1
    err = capfd.readouterr().err
    assert err.startswith("fedmor: error:") and "missing" in err


def test_steps_lines_follow_quiet_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(QUIET_ENV, raising=False)
    stream = io.StringIO()
    with Steps("train", 3, stream=stream) as steps:
        for i in range(3):
            steps.advance()
            steps.line(f"step {i + 1}/3 loss 0.[5]")  # brackets print as given (no markup)
    assert stream.getvalue().splitlines() == [f"step {i}/3 loss 0.[5]" for i in (1, 2, 3)]

    set_quiet()
    assert is_quiet() and os.environ[QUIET_ENV] == "1"
    quiet = io.StringIO()
    with Steps("train", 3, stream=quiet) as steps:
        steps.line("step 1/3")
    say("a line", stream=quiet)
    assert quiet.getvalue() == ""
    set_quiet(False)
    assert not is_quiet()
    say("a line", stream=quiet)
    assert quiet.getvalue() == "a line\n"
