"""Replacing a state file whole (a roster, a profiles book, a capture manifest), so a reader
sees the old file or the new one, never a part, and no name in the folder is followed."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: Path, data: bytes | str, *, mode: int = 0o600) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8) and return ``path``.

    The bytes go to a fresh file beside ``path``, created exclusively with a random name (so
    never a name planted in the folder, nor a link to another file), flushed to disk, then
    renamed over ``path``. The new file has ``mode`` less the umask, as any new file gets:
    0600 keeps it the owner's; 0o666 gives it the umask's usual mode. On failure the
    temporary file is removed and ``path`` is left as it was."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # O_EXCL fails on any existing name, a link included; mkstemp's fixed 0600 could not give
    # the umask's mode that some callers keep.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)
    return path


def _sync_folder(folder: Path) -> None:
    """Flush the folder's entries, so the rename survives a power cut (POSIX; Windows opens no
    folder as a file and commits a rename with the file system's own journal)."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
