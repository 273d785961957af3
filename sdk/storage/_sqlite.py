"""One SQLite file in WAL mode behind a lock: what both apps' stores are built on."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Literal

from sdk.storage._nonces import NONCES_TABLE, PurgeClock, record_nonce
from sdk.storage._wal import WalCheckpointer

_WAL_LIMIT_BYTES = 16 * 2**20
"""The size a checkpointed ``-wal`` file is truncated back to."""

__all__ = ["SQLiteFile"]


class SQLiteFile:
    """A WAL database at ``path`` with ``schema``; one connection guarded by ``_lock``, shared
    by the app's threads, with WAL checkpoints run in the background (``checkpoints``)."""

    def __init__(self, path: Path | str, schema: str, *,
                 synchronous: Literal["FULL", "NORMAL"]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Owner-only from the first byte: SQLite gives the -wal and -shm files the
            # database file's mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # Large pages (a new file only): a 4 MB stage message is 64 overflow pages, not 1000,
        # so it commits in fewer page writes.
        self._db.execute("PRAGMA page_size=65536")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(schema + NONCES_TABLE)
        # Checkpoints run in the background (``WalCheckpointer``), never inside a request's
        # commit under ``_lock``, where an automatic one stalls every request behind it.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        # A checkpoint that reached the end of the log cuts the file back to this size: the
        # -wal of a busy store (one frame per signed request's nonce) stays bounded on disk.
        self._db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
        self.checkpoints = WalCheckpointer(self.path)
        self._nonce_purge = PurgeClock()

    def record_nonce(self, sender: str, nonce: str, ts: float, *, keep_s: float) -> bool:
        """Record a request's nonce (the caller holds ``_lock`` and commits); False if
        ``sender`` already used it (a replay). Expired nonces are purged first, at most once a
        second."""
        return record_nonce(self._db, sender, nonce, ts, keep_s=keep_s,
                            purge=self._nonce_purge.due())

    def ready(self) -> str | None:
        """None if the database answers a read and grants a write lock, else the reason."""
        try:
            with self._lock:
                self._db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
                if not self._db.in_transaction:  # a group commit in flight holds it already
                    self._db.execute("BEGIN IMMEDIATE")
                    self._db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            return str(exc)
        return None

    def read(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Rows of a read-only query (for metrics)."""
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, args).fetchall()]

    def add_column(self, table: str, column: str, decl: str, fill: object = None) -> None:
        """Add ``column`` to a ``table`` created before it existed, set to ``fill`` in the
        rows already there (table and column names come from code, never from a request)."""
        with self._lock:
            if column not in {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                self._db.execute(f"UPDATE {table} SET {column}=?", (fill,))

    def delete(self, sql: str, args: tuple[object, ...] = ()) -> int:
        """Run one ``DELETE`` (retention purges); returns the number of rows deleted."""
        with self._lock:
            deleted = self._db.execute(sql, args).rowcount
        self.checkpoints.committed()
        return int(deleted)

    def keep_newest(self, table: str, max_bytes: int) -> int:
        """Delete the oldest rows of cache ``table`` (its ``data`` blobs, each row's
        ``stored_at``) until the rest hold at most ``max_bytes``; returns how many went (the
        table's name comes from code, never from a request)."""
        with self._lock:
            deleted = self._db.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
                f"SUM(length(data)) OVER (ORDER BY stored_at DESC, rowid DESC) AS upto "
                f"FROM {table}) WHERE upto > ?)", (max_bytes,)).rowcount
        return int(deleted)

    def scrub(self, attempts: int = 3) -> bool:
        """Copy the write-ahead log into the database and truncate it to zero bytes, so no
        older version of a deleted row survives in the ``-wal`` file (with ``secure_delete``,
        the checkpoint also overwrites the database pages that held it). Blocks writers while
        it runs; True once the log is empty, False if readers kept it busy ``attempts`` times
        (each attempt waits for them up to the connection's busy timeout)."""
        if self.path == ":memory:":
            return True
        with self._lock:
            for _ in range(attempts):
                busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                if not busy:
                    return True
        return False

    def close(self) -> None:
        """Stop the checkpoint thread and close the connection."""
        self.checkpoints.close()
        with self._lock:
            self._db.close()
