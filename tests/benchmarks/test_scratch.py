"""The benchmarks' work folder (examples/benchmarks/_scratch.py): a temporary one must not
outlive the script, a named one must."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_BENCH = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"


_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _scratch import scratch_dir
root = scratch_dir("fedmor-scratch-test-", Path(sys.argv[2]) if len(sys.argv) > 2 else None)
(root / "store.db").write_bytes(b"x" * 1024)
print(root)
"""


def _run(out: Path | None) -> Path:
    """Get a folder from ``scratch_dir`` in a fresh interpreter, write a file into it, exit;
    return the folder."""
    args = [sys.executable, "-c", _SCRIPT, str(_BENCH), *([str(out)] if out else [])]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def test_a_temporary_folder_is_removed_at_exit() -> None:
    root = _run(None)
    assert root.name.startswith("fedmor-scratch-test-")
    assert not root.exists()


def test_a_named_folder_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "apps"
    assert _run(out) == out
    assert (out / "store.db").read_bytes() == b"x" * 1024
