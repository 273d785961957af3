"""The benchmarks' work folder: the user's ``--out`` (kept), or a temporary one removed on exit.

A many-client ``apps.py`` run leaves its members' and the server's stores behind, so an
unnamed folder must not outlive the script.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

__all__ = ["scratch_dir"]


def scratch_dir(prefix: str, out: Path | None = None) -> Path:
    """``out`` (created if needed, kept), else a new temporary folder deleted at exit."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        return out
    root = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root
