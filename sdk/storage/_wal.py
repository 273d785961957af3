"""WAL checkpoints off the request path, for both apps' SQLite stores.

SQLite's automatic checkpoint runs inside whichever commit pushes the write-ahead log past its
threshold: that commit copies the whole log into the database file and fsyncs it while the
store's lock is held. With multi-megabyte stage messages that stalls every request of a round
at random (all threads queue behind one commit), and on a client it makes each large
``put_sent`` a checkpoint. Here the owner turns automatic
checkpoints off and asks for one at quiet moments (a round ended) or every ``every_commits``
commits; a daemon thread runs it on its own connection, so no request waits for it (a PASSIVE
checkpoint never blocks the writer). Durability is unchanged: a commit is durable once its log
frames are synced, whoever checkpoints them.
"""

from __future__ import annotations

import sqlite3
import threading

__all__ = ["WalCheckpointer"]


class WalCheckpointer:
    """Checkpoints the WAL database at ``path`` in a background thread when asked."""

    def __init__(self, path: str, *, every_commits: int = 200) -> None:
        self.path = path
        self.every_commits = every_commits
        self.done = 0  # checkpoints completed (tests read it)
        self._commits = 0
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False
        self._thread: threading.Thread | None = None
        if path != ":memory:":  # an in-memory database has no log to checkpoint
            self._thread = threading.Thread(target=self._run, name="fedmor-wal-checkpoint",
                                            daemon=True)
            self._thread.start()

    def committed(self) -> None:
        """Count one commit; every ``every_commits`` of them request a checkpoint, so the log
        stays bounded even when no quiet moment comes."""
        self._commits += 1  # unlocked: a lost increment only delays a checkpoint a little
        if self._commits >= self.every_commits:
            self.request()

    def request(self) -> None:
        """Checkpoint soon, in the background (returns at once)."""
        if self._thread is not None:
            self._commits = 0
            self._idle.clear()
            self._wake.set()

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until no requested checkpoint is pending (tests, shutdown)."""
        return self._idle.wait(timeout_s)

    def close(self) -> None:
        """Stop the thread after any pending checkpoint."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closed:
                    return
                try:
                    self.checkpoint(db)
                except sqlite3.Error:
                    pass  # busy or locked: the next request retries; the log only grows
                finally:
                    if not self._wake.is_set():
                        self._idle.set()
        finally:
            db.close()

    def checkpoint(self, db: sqlite3.Connection) -> None:
        """One PASSIVE checkpoint on ``db`` (the thread's own connection)."""
        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.done += 1
