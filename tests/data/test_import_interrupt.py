"""An import stopped by SIGTERM or Ctrl-C (SIGINT) leaves nothing behind and says so in one line."""

from __future__ import annotations

import csv
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _importkit import color_image


def _wait_for(condition: object, process: subprocess.Popen[str], what: str) -> None:
    """Until ``condition()`` holds (the import has started writing), or fail if the process ends."""
    deadline = time.monotonic() + 60
    while not condition():  # type: ignore[operator]
        assert process.poll() is None, f"the import ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        time.sleep(0.005)


@pytest.mark.parametrize(("signum", "code", "name"), [
    (signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT"),
])
def test_a_signalled_import_leaves_nothing(tmp_path: Path, signum: int, code: int, name: str
                                           ) -> None:
    (tmp_path / "src").mkdir()
    color_image(random.Random(0), "red").save(tmp_path / "src" / "scan.png")
    with (tmp_path / "src" / "export.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "prompt", "chosen", "rejected"])
        # Enough rows that the import is still running when the signal arrives.
        writer.writerows(["scan.png", f"Question {i}?", "yes", "no"] for i in range(100_000))
    process = subprocess.Popen(
        [sys.executable, "-m", "sdk.cli", "data", "import", "csv",
         str(tmp_path / "src" / "export.csv"), "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FEDMOR_QUIET": "1"},
        # A runner that started this suite in the background hands its children SIGINT
        # ignored, and Python keeps an inherited ignore: the import starts as a shell's would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def writing() -> bool:  # the hidden folder exists and holds a written pair
        return any((hidden / split / "pairs.jsonl").exists()
                   for hidden in tmp_path.glob(".out.import-*") for split in ("train", "eval"))

    try:
        _wait_for(writing, process, "a pair written")
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, (out, err)
    assert err == f"fedmor: import interrupted ({name}); nothing was written to {tmp_path / 'out'}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
