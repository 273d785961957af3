"""The used-nonce table each app's store keeps (replay protection) and its purge clock."""

from __future__ import annotations

import sqlite3
import time

__all__ = ["NONCES_TABLE", "PurgeClock", "record_nonce"]

# WITHOUT ROWID: one b-tree, so recording a nonce writes one page, not two (pages are 64 KB
# here, and every request records one).
NONCES_TABLE = """
CREATE TABLE IF NOT EXISTS nonces (
    sender TEXT NOT NULL, nonce TEXT NOT NULL, ts REAL NOT NULL, PRIMARY KEY (sender, nonce))
    WITHOUT ROWID;
"""
"""The SQL of the table each app keeps used nonces in (replay protection)."""


def record_nonce(db: sqlite3.Connection, sender: str, nonce: str, ts: float, *,
                 keep_s: float, purge: bool = True) -> bool:
    """Record a nonce in ``db``'s ``nonces`` table; False if ``sender`` already used it (a
    replay). With ``purge``, nonces older than ``keep_s`` are forgotten first: the timestamp
    check refuses their requests anyway, so keeping one a little longer changes nothing."""
    if purge:
        db.execute("DELETE FROM nonces WHERE ts < ?", (time.time() - keep_s,))
    try:
        db.execute("INSERT INTO nonces VALUES (?,?,?)", (sender, nonce, ts))
    except sqlite3.IntegrityError:
        return False
    return True


class PurgeClock:
    """When a store purges expired nonces: at most every ``every_s`` seconds, not on every
    request. The purge scans the whole table (no index on ``ts``: one would cost a page write
    per request), and a busy window holds thousands of nonces."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self._last = -float("inf")

    def due(self) -> bool:
        """True (and the clock restarts) when the last purge is ``every_s`` old; callers hold
        their store's lock."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            return False
        self._last = now
        return True
