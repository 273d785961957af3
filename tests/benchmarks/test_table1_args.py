"""examples/benchmarks/table1.py refuses vision flags that its GRPO settings would ignore."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
import table1


class _Accepted(Exception):
    """Raised where main() goes on past argument checking: the arguments were accepted."""


def _run(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int | str | None:
    def accepted(*args: object, **kwargs: object) -> None:
        raise _Accepted

    # RowLog is main()'s first step after the checks; stopping there keeps the test instant.
    monkeypatch.setattr(table1, "RowLog", accepted)
    monkeypatch.setattr(sys, "argv", ["table1.py", "--out", str(tmp_path), *argv])
    try:
        table1.main()
    except SystemExit as exit_:
        return exit_.code
    except _Accepted:
        return None
    raise AssertionError("main() neither stopped nor reached RowLog")


@pytest.mark.parametrize(("argv", "message"), [
    (["--no-freeze-vision"], "--no-freeze-vision has no effect with LoRA"),
    (["--lora-rank", "4", "--no-freeze-vision"], "--no-freeze-vision has no effect with LoRA"),
    (["--lora-rank", "0", "--lora-vision"], "--lora-vision needs LoRA"),
    (["--lora-rank", "-1"], "--lora-rank must be >= 0"),
])
def test_vision_flags_that_would_be_ignored_are_parser_errors(
        argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(argv, tmp_path, monkeypatch) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["--lora-vision"], ["--lora-rank", "0", "--no-freeze-vision"],
                                  ["--lora-rank", "0"]])
def test_consistent_vision_flags_are_accepted(argv: list[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(argv, tmp_path, monkeypatch) is None
