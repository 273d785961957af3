"""An online backup of either app's SQLite file: a consistent copy taken while the app runs."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["backup_sqlite"]


def backup_sqlite(source: Path, out: Path) -> int:
    """Copy the SQLite database at ``source`` (in use or not) to ``out`` with SQLite's online
    backup API: a consistent snapshot, committed transactions only. Returns its size in bytes."""
    if not source.exists():
        raise FileNotFoundError(f"no database at {source}")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 before a byte is copied (whatever the umask): it holds what the live file
    # holds (round secrets on a member), so no other user may open it even mid-copy.
    try:
        os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise FileExistsError(f"{out} exists; refusing to overwrite it") from None
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    return out.stat().st_size
