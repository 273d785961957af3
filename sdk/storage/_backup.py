"""An online backup of either app's SQLite file: a consistent copy taken while the app runs."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

__all__ = ["backup_sqlite"]


def backup_sqlite(source: Path, out: Path) -> int:
    """Copy the SQLite database at ``source`` (in use or not) to ``out`` with SQLite's online
    backup API: a consistent snapshot, committed transactions only. Returns its size in bytes.

    Raises:
        FileNotFoundError: no file at ``source``.
        ValueError: ``out`` exists, or ``source`` is not a SQLite database.
    """
    if not source.exists():
        raise FileNotFoundError(f"no database at {source}")
    if out.exists():
        raise ValueError(f"{out} exists; refusing to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    # The copy goes to a temporary file beside ``out`` and takes its name only once complete:
    # a failed or interrupted backup leaves nothing that looks like a backup. mkstemp creates
    # it 0600 before a byte is copied (whatever the umask): it holds what the live file holds
    # (round secrets on a member), so no other user may open it even mid-copy.
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    os.close(fd)
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        dst = sqlite3.connect(name)
        try:
            src.backup(dst)
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{source} is not a SQLite database the backup can read ({exc}): "
                             f"is db_path in the settings the app's database?") from None
        finally:
            dst.close()
            src.close()
        try:
            os.link(name, out)  # unlike a rename, never replaces a file made meanwhile
        except FileExistsError:
            raise ValueError(f"{out} exists; refusing to overwrite it") from None
    finally:
        os.unlink(name)
    return out.stat().st_size
