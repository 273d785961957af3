"""An online backup of either app's SQLite file: a consistent copy taken while the app runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["backup_sqlite"]


def backup_sqlite(source: Path, out: Path) -> int:
    """Copy the SQLite database at ``source`` (in use or not) to ``out`` with SQLite's online
    backup API: a consistent snapshot, committed transactions only. Returns its size in bytes."""
    if not source.exists():
        raise FileNotFoundError(f"no database at {source}")
    if out.exists():
        raise FileExistsError(f"{out} exists; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    out.chmod(0o600)  # it holds what the live file holds (round secrets on a member)
    return out.stat().st_size
