"""examples/benchmarks/table1.py refuses flags that its settings would ignore or refuse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
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
    (["--warmup-target", "1.5"], "--warmup-target: Input should be less than or equal to 1"),
    (["--warmup-target", "most"], "a P(right) in (0, 1] or none, not 'most'"),
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


def test_the_warmup_target_is_a_saved_setting(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, object]] = []

    def accepted(out: Path, settings: dict[str, object], *args: object, **kwargs: object) -> None:
        seen.append(settings)
        raise _Accepted

    monkeypatch.setattr(table1, "RowLog", accepted)
    for target in ("0.72", "0.85", "none"):
        monkeypatch.setattr(sys, "argv", ["table1.py", "--out", str(tmp_path),
                                          "--warmup-target", target])
        with pytest.raises(_Accepted):
            table1.main()
    # --resume compares these: rows made on another base policy are not reused.
    assert [s["warmup"]["stop_at_expected"] for s in seen] == [0.72, 0.85, None]  # type: ignore[index]
