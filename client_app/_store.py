"""The client's own SQLite state: enrollment, image cache, query audit log, round progress.

``round_state`` holds each open round's protocol state, round secrets included (the secure
aggregation keys, the self-mask seed, other members' key shares): the file must be protected like
the identity key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.storage import Retention, SQLiteFile
from sdk.wire import StagePayload

if TYPE_CHECKING:
    from client_app._settings import ClientSettings

__all__ = ["ClientStore", "read_rounds"]

_log = logging.getLogger("fedmor.client")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS images (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
-- no AUTOINCREMENT (rows are never deleted, so ids still only grow): it cost a write of
-- the sqlite_sequence page (64 KB here) with every query
CREATE TABLE IF NOT EXISTS query_audit (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, caller TEXT NOT NULL,
    query_sha256 TEXT NOT NULL, items INTEGER NOT NULL, item_hashes TEXT NOT NULL);
-- created_at: the server's creation time, which tells a round from a later one under the same
-- id (a server restored from a backup hands out the ids created after the backup again)
CREATE TABLE IF NOT EXISTS rounds (round_id INTEGER PRIMARY KEY, status TEXT NOT NULL,
    detail TEXT, created_at REAL);
-- payload: JSON text, or a BLOB for a binary stage message
CREATE TABLE IF NOT EXISTS sent (round_id INTEGER NOT NULL, stage TEXT NOT NULL,
    payload TEXT NOT NULL, PRIMARY KEY (round_id, stage));
CREATE TABLE IF NOT EXISTS round_state (round_id INTEGER PRIMARY KEY, state TEXT NOT NULL);
-- the DP rounds this site agreed to take part in (counted before it sends anything), and its
-- epsilon after each
CREATE TABLE IF NOT EXISTS dp_ledger (round_id INTEGER NOT NULL, created_at REAL NOT NULL,
    noise_multiplier REAL NOT NULL, epsilon REAL NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (round_id, created_at));
"""


_UPDATE_COLUMNS = (("pairs", "INTEGER"), ("loss_before", "REAL"), ("loss_after", "REAL"))
_ROUND_FIELDS = ("round_id", "status", "detail", "created_at", *(c for c, _ in _UPDATE_COLUMNS))


def read_rounds(path: Path | str) -> tuple[str | None, list[dict[str, Any]]]:
    """(this member's client id, its rounds oldest first: status, detail, pairs used, local
    loss before and after), read from its store without writing to it, so a running client
    app is not disturbed."""
    import sqlite3

    if not Path(path).is_file():
        raise FileNotFoundError(f"no client store at {path} (the db_path setting): the client "
                                f"app has not run with these settings yet")
    db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    try:
        columns = {r[1] for r in db.execute("PRAGMA table_info(rounds)")}
        fields = [c for c in _ROUND_FIELDS if c in columns]
        rows = db.execute(f"SELECT {', '.join(fields)} FROM rounds ORDER BY round_id").fetchall()
        found = db.execute("SELECT value FROM kv WHERE key='client_id'").fetchone()
    finally:
        db.close()
    return (None if found is None else str(found[0]),
            [{c: dict(zip(fields, r, strict=True)).get(c) for c in _ROUND_FIELDS} for r in rows])


class ClientStore(SQLiteFile):
    """Thread-safe access to the client's SQLite file (WAL)."""

    def __init__(self, path: Path | str, *,
                 images_bytes: int = Retention().images_bytes) -> None:
        self.images_bytes = images_bytes  # the image cache's bound ([retention] images_bytes)
        # NORMAL: durable across an app crash (not a power cut), one fsync per checkpoint
        # instead of per query; the audit log is local bookkeeping, not an acknowledgement.
        super().__init__(path, _SCHEMA, synchronous="NORMAL")
        # Deleted rows (a round's secrets) are overwritten, not left in free pages.
        self._db.execute("PRAGMA secure_delete=ON")
        with self._lock:  # a file from before rounds.created_at
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(rounds)")}
            if "created_at" not in columns:
                self._db.execute("ALTER TABLE rounds ADD COLUMN created_at REAL")
        self.add_column("images", "stored_at", "REAL", fill=time.time())  # for retention
        # What this member gave in each round it computed an update for (fedmor client status).
        for column, decl in _UPDATE_COLUMNS:
            self.add_column("rounds", column, decl)
        # A crash between a round's DELETE and its scrub left old frames in the log.
        self.scrub()

    @classmethod
    def of(cls, settings: ClientSettings) -> ClientStore:
        """The store a member's settings name: ``db_path``, bounded by ``[retention]``."""
        return cls(settings.db_path, images_bytes=settings.retention.images_bytes)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """The writes inside as one commit, rolled back on any error (the caller holds the
        lock)."""
        self._db.execute("BEGIN")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._lock:
            row = self._db.execute(sql, args).fetchone()
            return None if row is None else row[0]

    def _dicts(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """The rows of ``sql``, each as a dict by the column names the query selects, so a
        read names its columns once."""
        with self._lock:
            cursor = self._db.execute(sql, args)
            rows = cursor.fetchall()
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _exec(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        with self._lock:
            self._db.execute(sql, args)
        self.checkpoints.committed()

    def get(self, key: str) -> str | None:
        """A stored setting (client_id, server_public_key), or None."""
        value = self._one("SELECT value FROM kv WHERE key=?", (key,))
        return None if value is None else str(value)

    def put(self, key: str, value: str) -> None:
        """Store a setting."""
        self._exec("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, value))

    def put_images(self, images: dict[str, bytes]) -> None:
        """Cache images by their hash, then drop the oldest past ``images_bytes``: one commit
        and one pass over the cache per batch, not per image."""
        if not images:
            return
        now = time.time()
        with self._lock, self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO images(sha256, data, stored_at) "
                                 "VALUES (?,?,?)", [(h, d, now) for h, d in images.items()])
            self.keep_newest("images", self.images_bytes)
        self.checkpoints.committed()

    def image(self, sha256: str) -> bytes | None:
        """A cached image, or None."""
        data = self._one("SELECT data FROM images WHERE sha256=?", (sha256,))
        return None if data is None else bytes(data)

    def record_query(self, caller: str, query_sha256: str, item_hashes: list[str]) -> None:
        """Audit one answered query by its input hashes (never the inputs themselves)."""
        self._exec("INSERT INTO query_audit(ts, caller, query_sha256, items, item_hashes) "
                   "VALUES (?,?,?,?,?)", (time.time(), caller, query_sha256, len(item_hashes),
                                          json.dumps(item_hashes)))

    def items_since(self, caller: str, since: float) -> list[tuple[float, int]]:
        """(time, items) of ``caller``'s queries answered since ``since`` (the reward budget's
        window), oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT ts, items FROM query_audit WHERE caller=? AND ts>=? "
                                    "ORDER BY id", (caller, since)).fetchall()
        return [(float(ts), int(n)) for ts, n in rows]

    def audit_log(self) -> list[dict[str, Any]]:
        """All audit records, oldest first."""
        return self._dicts("SELECT ts, caller, query_sha256, items FROM query_audit ORDER BY id")

    def record_dp(self, round_id: int, created_at: float, noise_multiplier: float,
                  epsilon: float) -> None:
        """Count a DP round (its id and the server's creation time) against this site's
        budget, once."""
        self._exec("INSERT OR IGNORE INTO dp_ledger VALUES (?,?,?,?,?)",
                   (round_id, created_at, noise_multiplier, epsilon, time.time()))

    def dp_spent(self, *, besides: tuple[int, float]) -> list[float]:
        """The noise multipliers of the DP rounds counted so far, but the round ``besides``
        (round id, creation time)."""
        with self._lock:
            rows = self._db.execute("SELECT noise_multiplier FROM dp_ledger WHERE NOT "
                                    "(round_id=? AND created_at=?) ORDER BY at",
                                    besides).fetchall()
        return [float(r[0]) for r in rows]

    def dp_ledger(self) -> list[dict[str, float]]:
        """Every counted DP round: round_id, noise_multiplier, epsilon (after it), at."""
        return self._dicts("SELECT round_id, noise_multiplier, epsilon, at FROM dp_ledger "
                           "ORDER BY at")

    def use_nonce(self, sender: str, nonce: str, ts: float, *, keep_s: float) -> bool:
        """Record a nonce; False if it was already used (a replay)."""
        with self._lock:
            fresh = self.record_nonce(sender, nonce, ts, keep_s=keep_s)
        self.checkpoints.committed()
        return fresh

    def round_status(self, round_id: int) -> str | None:
        """This client's view of a round: running, done, abandoned — or None if unseen."""
        value = self._one("SELECT status FROM rounds WHERE round_id=?", (round_id,))
        return None if value is None else str(value)

    def set_round(self, round_id: int, status: str, detail: str = "",
                  created_at: float | None = None) -> None:
        """Record this client's progress in a round (``created_at``: the server's, kept once
        given)."""
        self._exec("INSERT INTO rounds(round_id, status, detail, created_at) VALUES (?,?,?,?) "
                   "ON CONFLICT(round_id) DO UPDATE SET "
                   "status=excluded.status, detail=excluded.detail, "
                   "created_at=COALESCE(excluded.created_at, created_at)",
                   (round_id, status, detail, created_at))

    def record_update(self, round_id: int, pairs: int, loss_before: float | None,
                      loss_after: float | None) -> None:
        """Record what this member's update for a round was made of: the local pairs used and
        the router's mean local loss before and after its local training."""
        self._exec("UPDATE rounds SET pairs=?, loss_before=?, loss_after=? WHERE round_id=?",
                   (pairs, loss_before, loss_after, round_id))

    def round_update(self, round_id: int) -> dict[str, Any] | None:
        """The pairs and local losses recorded for a round, or None."""
        rows = self._dicts("SELECT pairs, loss_before, loss_after FROM rounds WHERE "
                           "round_id=? AND pairs IS NOT NULL", (round_id,))
        return rows[0] if rows else None

    def round_created(self, round_id: int) -> float | None:
        """The server's creation time of the round this client recorded under ``round_id``."""
        value = self._one("SELECT created_at FROM rounds WHERE round_id=?", (round_id,))
        return None if value is None else float(value)

    def drop_round(self, round_id: int) -> None:
        """Forget this client's record of a round: the server reuses its id for a new one."""
        self._exec("DELETE FROM rounds WHERE round_id=?", (round_id,))

    def sent(self, round_id: int) -> dict[str, StagePayload]:
        """The stage messages already sent in a round (to resend identically after a restart)."""
        with self._lock:
            rows = self._db.execute("SELECT stage, payload FROM sent WHERE round_id=?",
                                    (round_id,)).fetchall()
        return {r[0]: r[1] if isinstance(r[1], bytes) else json.loads(r[1]) for r in rows}

    def round_state(self, round_id: int) -> dict[str, Any] | None:
        """The protocol state saved with the last message of a round, or None."""
        value = self._one("SELECT state FROM round_state WHERE round_id=?", (round_id,))
        return None if value is None else dict(json.loads(value))

    def put_sent(self, round_id: int, stage: str, payload: StagePayload,
                 state: dict[str, Any]) -> None:
        """Store a message and the protocol state after producing it, in one durable
        transaction, before sending it: after a crash the client resends the identical message
        and continues the round from ``state``."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload)
        with self._lock:
            # FULL for this one commit: the server may act on the message once it is sent, so
            # its state must survive even a power cut (other writes stay NORMAL).
            self._db.execute("PRAGMA synchronous=FULL")
            try:
                with self._transaction():
                    self._db.execute("INSERT OR IGNORE INTO sent VALUES (?,?,?)",
                                     (round_id, stage, data))
                    self._db.execute("INSERT OR REPLACE INTO round_state VALUES (?,?)",
                                     (round_id, json.dumps(state)))
            finally:
                self._db.execute("PRAGMA synchronous=NORMAL")
        self.checkpoints.committed()

    def rounds_with_secrets(self) -> list[int]:
        """Rounds whose secrets or sent messages are still kept (a round this client has not
        seen end, e.g. one that ended while it was down)."""
        with self._lock:
            rows = self._db.execute("SELECT round_id FROM round_state UNION "
                                    "SELECT round_id FROM sent").fetchall()
        return sorted(int(r[0]) for r in rows)

    def forget_round(self, round_id: int) -> None:
        """Drop a round's secrets and sent messages once it is over for this client (only its
        status stays): secrets live no longer than the round, in no file. The rows are
        overwritten (``secure_delete``) and the write-ahead log, which still holds every
        version of them the round wrote, is checkpointed and truncated (``scrub``)."""
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM round_state WHERE round_id=?", (round_id,))
            self._db.execute("DELETE FROM sent WHERE round_id=?", (round_id,))
            self._db.execute("COMMIT")
        if not self.scrub():  # a reader held the log: the next round's end retries
            _log.warning("round %d: the write-ahead log could not be truncated (busy); its "
                         "secrets stay in %s-wal until the next round ends", round_id, self.path)
