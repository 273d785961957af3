"""The server's SQLite store (WAL): every acknowledged fact is committed before the ack."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sdk.wire import ConflictError, SQLiteFile, StagePayload, record_nonce

__all__ = ["ConflictError", "Store", "payload_record"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS roster (
    name TEXT PRIMARY KEY, public_key TEXT NOT NULL, token_sha256 TEXT, token_used_at REAL,
    role TEXT NOT NULL DEFAULT 'member');
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, public_key TEXT NOT NULL,
    reward_url TEXT, enrolled_at REAL NOT NULL, clip_bound REAL,
    role TEXT NOT NULL DEFAULT 'member');
CREATE TABLE IF NOT EXISTS rounds (
    round_id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, spec TEXT NOT NULL,
    status TEXT NOT NULL, stage_index INTEGER NOT NULL, stage_opened_at REAL NOT NULL,
    router_version INTEGER, error TEXT, created_at REAL NOT NULL, finished_at REAL);
-- payload: JSON text, or a BLOB for a raw octet-stream body (TEXT affinity keeps blobs as-is)
CREATE TABLE IF NOT EXISTS stage_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, round_id INTEGER NOT NULL, stage TEXT NOT NULL,
    client_id TEXT NOT NULL, payload TEXT NOT NULL, digest TEXT NOT NULL, stored_at REAL NOT NULL,
    UNIQUE (round_id, stage, client_id));
CREATE TABLE IF NOT EXISTS stage_closures (
    round_id INTEGER NOT NULL, stage TEXT NOT NULL, broadcast TEXT NOT NULL,
    closed_at REAL NOT NULL, PRIMARY KEY (round_id, stage));
CREATE TABLE IF NOT EXISTS router_versions (
    version INTEGER PRIMARY KEY AUTOINCREMENT, round_id INTEGER, sha256 TEXT NOT NULL,
    length INTEGER NOT NULL, blob BLOB NOT NULL, created_at REAL NOT NULL);
-- no AUTOINCREMENT (rows are never deleted, so ids still only grow): it cost a write of
-- the sqlite_sequence page with every record
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, detail TEXT NOT NULL);
-- a member's site policy refused the round: it sends nothing more there
CREATE TABLE IF NOT EXISTS round_refusals (
    round_id INTEGER NOT NULL, client_id TEXT NOT NULL, reason TEXT NOT NULL,
    detail TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (round_id, client_id));
-- a DP round's terms (sdk.wire.DPTerms as JSON) and its own epsilon, fixed at creation
CREATE TABLE IF NOT EXISTS round_dp (
    round_id INTEGER PRIMARY KEY, terms TEXT NOT NULL, epsilon REAL NOT NULL);
-- revoked identities (server_app._identity): a (name, roster key) pair never comes back
CREATE TABLE IF NOT EXISTS revocations (
    name TEXT NOT NULL, roster_key TEXT NOT NULL, client_id TEXT, client_key TEXT,
    role TEXT NOT NULL, enrolled_at REAL, at REAL NOT NULL, actor TEXT NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY (name, roster_key));
CREATE TABLE IF NOT EXISTS last_seen (client_id TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS images (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS client_images (
    client_id TEXT NOT NULL, sha256 TEXT NOT NULL, PRIMARY KEY (client_id, sha256));
-- the aligner's online router (Neural TS head, U, rng) per selection method, after each update
CREATE TABLE IF NOT EXISTS online_router (
    method TEXT PRIMARY KEY, router_version INTEGER NOT NULL, run TEXT NOT NULL,
    step INTEGER, last_loss REAL, state BLOB NOT NULL, updated_at REAL NOT NULL);
-- items each auditor had scored (server_app._audit_api's budget; survives a restart)
CREATE TABLE IF NOT EXISTS auditor_items (
    auditor TEXT NOT NULL, at REAL NOT NULL, items INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reward_queries (
    query_id INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT NOT NULL, items TEXT NOT NULL,
    status TEXT NOT NULL, scores TEXT, created_at REAL NOT NULL, answered_at REAL);
"""


def payload_record(payload: StagePayload, *,
                   body_sha256: str | None = None) -> tuple[str | bytes, str]:
    """(stored form, sha256) of a stage payload: raw bytes as they arrived (a BLOB), a JSON
    object as canonical text. Callers compute it outside their locks: hashing 4 MB takes ms.
    ``body_sha256``: the hex sha256 of raw ``bytes`` if already known (authentication hashed
    the same request body); ignored for a JSON payload, whose canonical text differs."""
    if isinstance(payload, bytes) and body_sha256 is not None:
        return payload, body_sha256
    data = payload if isinstance(payload, bytes) else json.dumps(
        payload, sort_keys=True, separators=(",", ":"))
    return data, hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "spec": json.loads(row["spec"])}


class Store(SQLiteFile):
    """Thread-safe access to the server's SQLite file; one connection guarded by a lock."""

    def __init__(self, path: Path | str) -> None:
        # FULL: an ack must survive a power cut, not only a process kill.
        super().__init__(path, _SCHEMA, synchronous="FULL")
        self._db.row_factory = sqlite3.Row
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(clients)")}
        if "clip_bound" not in columns:  # a store created before members announced it
            self._db.execute("ALTER TABLE clients ADD COLUMN clip_bound REAL")
        self._add_role_columns()
        self.add_column("images", "stored_at", "REAL", fill=time.time())  # for retention
        # Group commit: stage messages stored with ``defer_commit`` sit in one open transaction
        # until ``flush`` (or any durable write) commits them all with one fsync.
        self._pending = False
        self._depth = 0  # nesting of ``transaction`` blocks

    def _add_role_columns(self) -> None:
        """A store written before roles existed: every identity in it is a member."""
        for table in ("roster", "clients"):
            columns = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if "role" not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN role TEXT NOT NULL "
                                 "DEFAULT 'member'")

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, args).fetchone()
            return row

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group the writes inside into one commit, so one fsync (a nested block joins the
        outer one; deferred stage messages are committed with it); the other threads wait for
        the whole block."""
        with self._lock:
            if self._depth:
                yield
                return
            grouped = self._db.in_transaction  # deferred messages are pending: keep them
            self._db.execute("SAVEPOINT block" if grouped else "BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
            except BaseException:
                if grouped:  # undo the block only: the deferred messages stay pending
                    self._db.execute("ROLLBACK TO block")
                    self._db.execute("RELEASE block")
                else:
                    self._db.execute("ROLLBACK")
                raise
            finally:
                self._depth -= 1
            if grouped:
                self._db.execute("RELEASE block")
            self._commit()

    def _commit(self) -> None:
        self._db.execute("COMMIT")
        self._pending = False
        self.checkpoints.committed()

    def checkpoint_soon(self) -> None:
        """Fold the write-ahead log into the database file in the background (a quiet moment:
        a round just ended)."""
        self.checkpoints.request()

    @property
    def pending(self) -> bool:
        """Whether stage messages stored with ``defer_commit`` still wait for their commit."""
        return self._pending

    def flush(self) -> None:
        """Commit the deferred stage messages (one fsync for all of them), if any."""
        with self._lock:
            if self._pending:
                self._commit()

    def _write(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        with self._lock:
            cur = self._db.execute(sql, args)
            if self._pending and not self._depth:  # durable on return, as without a group
                self._commit()
            elif not self._db.in_transaction:  # committed on its own (autocommit)
                self.checkpoints.committed()
            return int(cur.lastrowid or 0)

    # -- roster and clients --------------------------------------------------------------------
    def upsert_roster(self, name: str, public_key: str, token_sha256: str | None,
                      role: str = "member") -> None:
        """Add or update a roster entry; a used token stays used unless the hash changes."""
        self._write(
            "INSERT INTO roster(name, public_key, token_sha256, role) VALUES (?,?,?,?) "
            "ON CONFLICT(name) DO UPDATE SET public_key=excluded.public_key, "
            "token_used_at=CASE WHEN roster.token_sha256 IS excluded.token_sha256 "
            "THEN roster.token_used_at ELSE NULL END, token_sha256=excluded.token_sha256, "
            "role=excluded.role",
            (name, public_key, token_sha256, role),
        )

    def roster(self) -> list[dict[str, Any]]:
        """All roster entries."""
        return [dict(r) for r in self._all("SELECT * FROM roster ORDER BY name")]

    def enroll(self, *, name: str, token: str, public_key: str, reward_url: str | None,
               new_id: str, clip_bound: float | None = None) -> tuple[dict[str, Any], bool]:
        """Consume ``name``'s one-time token and create the client; returns (client, created).

        A retry with the same name and key after success returns the same client (idempotent).
        """
        token_hash = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            entry = self._one("SELECT * FROM roster WHERE name=?", (name,))
            if entry is None:
                raise PermissionError(f"client name {name!r} is not in the roster")
            if entry["public_key"] != public_key:
                raise PermissionError(f"public key does not match the roster entry for {name!r}")
            if entry["token_sha256"] != token_hash:
                raise PermissionError(f"wrong enrollment token for {name!r}")
            existing = self._one("SELECT * FROM clients WHERE name=?", (name,))
            if existing is not None:
                if existing["role"] != entry["role"]:
                    raise ConflictError(f"{name!r} is enrolled as {existing['role']}, the "
                                        f"roster now says {entry['role']}: enroll a new name")
                if existing["public_key"] == public_key:
                    return dict(existing), False
                raise ConflictError(f"{name!r} is already enrolled with another key")
            if entry["token_used_at"] is not None:
                raise PermissionError(f"enrollment token for {name!r} was already used")
            now = time.time()
            with self.transaction():
                self._db.execute("UPDATE roster SET token_used_at=? WHERE name=?", (now, name))
                self._db.execute(
                    "INSERT INTO clients(client_id, name, public_key, reward_url, enrolled_at, "
                    "clip_bound, role) VALUES (?,?,?,?,?,?,?)",
                    (new_id, name, public_key, reward_url, now, clip_bound, entry["role"]))
            row = self._one("SELECT * FROM clients WHERE client_id=?", (new_id,))
            assert row is not None
            return dict(row), True

    def client(self, client_id: str) -> dict[str, Any] | None:
        """One enrolled client, or None."""
        row = self._one("SELECT * FROM clients WHERE client_id=?", (client_id,))
        return None if row is None else dict(row)

    def clients(self, role: str | None = "member") -> list[dict[str, Any]]:
        """Enrolled identities with ``role`` (default: the members; None: all), oldest
        first."""
        return [dict(r) for r in self._all("SELECT * FROM clients WHERE ?1 IS NULL OR role=?1 "
                                           "ORDER BY enrolled_at", (role,))]

    def use_nonce(self, sender: str, nonce: str, ts: float, *, keep_s: float) -> bool:
        """Record a nonce; False if ``sender`` already used it (a replay)."""
        with self._lock:
            purge = self._nonce_purge.due()
            if self._db.in_transaction:  # joins the pending group: committed with it (FULL)
                return record_nonce(self._db, sender, nonce, ts, keep_s=keep_s, purge=purge)
            # Every request records a nonce, so no fsync for it (NORMAL: it survives a process
            # crash, not a power cut). A request replayed after a power cut changes nothing: a
            # stage message gets its original ack, an answered query a 409, a GET reads.
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                return record_nonce(self._db, sender, nonce, ts, keep_s=keep_s, purge=purge)
            finally:
                self._db.execute("PRAGMA synchronous=FULL")
                self.checkpoints.committed()

    # -- rounds and stage messages -------------------------------------------------------------
    def create_round(self, kind: str, spec: dict[str, Any]) -> int:
        """Insert an open round at stage 0."""
        now = time.time()
        return self._write(
            "INSERT INTO rounds(kind, spec, status, stage_index, stage_opened_at, created_at) "
            "VALUES (?,?,?,?,?,?)", (kind, json.dumps(spec), "open", 0, now, now))

    def round(self, round_id: int) -> dict[str, Any] | None:
        """One round row (``spec`` decoded), or None."""
        row = self.round_row(round_id)
        return None if row is None else _decoded(row)

    def rounds(self, status: str | None = None) -> list[dict[str, Any]]:
        """All rounds, optionally with one status, oldest first."""
        return [_decoded(r) for r in self.round_rows(status)]

    def round_row(self, round_id: int) -> dict[str, Any] | None:
        """One round row with ``spec`` as stored (JSON text, ``"{}"`` until the round started),
        or None: the per-request form, since a spec never changes once written and its
        decoded form is kept by whoever needs it (decoding it ~600 times a round showed up)."""
        row = self._one("SELECT * FROM rounds WHERE round_id=?", (round_id,))
        return None if row is None else dict(row)

    def round_rows(self, status: str | None = None) -> list[dict[str, Any]]:
        """``round_row`` of all rounds (optionally with one status), oldest first, in one
        query."""
        return [dict(r) for r in self._all("SELECT * FROM rounds WHERE ?1 IS NULL OR status=?1 "
                                           "ORDER BY round_id", (status,))]

    def update_round(self, round_id: int, **fields: Any) -> None:
        """Set some columns of a round."""
        cols = ", ".join(f"{k}=?" for k in fields)
        self._write(f"UPDATE rounds SET {cols} WHERE round_id=?", (*fields.values(), round_id))

    def put_message(self, round_id: int, stage: str, client_id: str,
                    record: tuple[str | bytes, str], *,
                    defer_commit: bool = False) -> tuple[str, float, bool]:
        """Store a stage message (``payload_record``'s output) once and commit it; returns
        (digest, stored_at, new). An identical retry returns the original ack; a different
        payload raises ConflictError. With ``defer_commit`` the message joins the open group
        transaction instead: the caller must ``flush`` before it acknowledges the message."""
        data, digest = record
        with self._lock:
            row = self._one("SELECT digest, stored_at FROM stage_messages WHERE round_id=? AND "
                            "stage=? AND client_id=?", (round_id, stage, client_id))
            if row is not None:
                if row["digest"] != digest:
                    raise ConflictError(f"client {client_id} already sent a different message "
                                        f"for round {round_id} stage {stage}")
                return digest, float(row["stored_at"]), False
            now = time.time()
            sql = ("INSERT INTO stage_messages(round_id, stage, client_id, payload, digest, "
                   "stored_at) VALUES (?,?,?,?,?,?)")
            args = (round_id, stage, client_id, data, digest, now)
            if not defer_commit:
                self._write(sql, args)
                return digest, now, True
            if not self._db.in_transaction:
                self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(sql, args)
            self._pending = True
            return digest, now, True

    def has_message(self, round_id: int, stage: str, client_id: str) -> bool:
        """Whether a client's message for one stage is stored (without loading it)."""
        return self._one("SELECT 1 FROM stage_messages WHERE round_id=? AND stage=? AND "
                         "client_id=?", (round_id, stage, client_id)) is not None

    def messages(self, round_id: int, stage: str) -> dict[str, StagePayload]:
        """All stored messages of one stage, by client id, in arrival order."""
        rows = self._all("SELECT client_id, payload FROM stage_messages WHERE round_id=? AND "
                         "stage=? ORDER BY seq", (round_id, stage))
        return {r["client_id"]: r["payload"] if isinstance(r["payload"], bytes)
                else json.loads(r["payload"]) for r in rows}

    def submitted(self, round_id: int, stage: str) -> set[str]:
        """Client ids that sent a message for one stage."""
        rows = self._all("SELECT client_id FROM stage_messages WHERE round_id=? AND stage=?",
                         (round_id, stage))
        return {r["client_id"] for r in rows}

    def put_closure(self, round_id: int, stage: str, broadcast: dict[str, Any]) -> None:
        """Record that a stage closed and what the server sends each client next."""
        self._write("INSERT OR REPLACE INTO stage_closures VALUES (?,?,?,?)",
                    (round_id, stage, json.dumps(broadcast), time.time()))

    def closure(self, round_id: int, stage: str) -> dict[str, Any] | None:
        """The broadcast recorded when a stage closed, or None if still open."""
        row = self._one("SELECT broadcast FROM stage_closures WHERE round_id=? AND stage=?",
                        (round_id, stage))
        return None if row is None else dict(json.loads(row["broadcast"]))

    def delete_round_state(self, round_id: int) -> None:
        """Forget one round's messages and closures (a clean restart of an open round)."""
        with self.transaction():
            self._db.execute("DELETE FROM stage_messages WHERE round_id=?", (round_id,))
            self._db.execute("DELETE FROM stage_closures WHERE round_id=?", (round_id,))

    # -- router versions -----------------------------------------------------------------------
    def add_version(self, round_id: int | None, blob: bytes, length: int) -> int:
        """Store a router version; returns its number."""
        digest = hashlib.sha256(blob).hexdigest()
        return self._write("INSERT INTO router_versions(round_id, sha256, length, blob, "
                           "created_at) VALUES (?,?,?,?,?)",
                           (round_id, digest, length, blob, time.time()))

    def version(self, version: int | None = None) -> dict[str, Any] | None:
        """One router version (the latest when ``version`` is None), blob included."""
        if version is None:
            row = self._one("SELECT * FROM router_versions ORDER BY version DESC LIMIT 1")
        else:
            row = self._one("SELECT * FROM router_versions WHERE version=?", (version,))
        return None if row is None else dict(row)

    def put_refusal(self, round_id: int, client_id: str, reason: str, detail: str) -> bool:
        """Record a member's refusal of a round (the first one stands); False if already
        recorded."""
        with self._lock:
            if self._one("SELECT 1 FROM round_refusals WHERE round_id=? AND client_id=?",
                         (round_id, client_id)) is not None:
                return False
            self._write("INSERT INTO round_refusals VALUES (?,?,?,?,?)",
                        (round_id, client_id, reason, detail, time.time()))
        return True

    def refusals(self, round_id: int) -> list[dict[str, Any]]:
        """The round's refusals, oldest first."""
        return [dict(r) for r in self._all("SELECT client_id, reason, detail, at FROM "
                                           "round_refusals WHERE round_id=? ORDER BY at",
                                           (round_id,))]

    def put_round_dp(self, round_id: int, terms: dict[str, Any], epsilon: float) -> None:
        """Record a DP round's terms and its own epsilon."""
        self._write("INSERT OR REPLACE INTO round_dp VALUES (?,?,?)",
                    (round_id, json.dumps(terms), epsilon))

    def round_dp(self, round_id: int) -> tuple[dict[str, Any], float] | None:
        """(terms, epsilon) of a DP round, or None."""
        row = self._one("SELECT terms, epsilon FROM round_dp WHERE round_id=?", (round_id,))
        return None if row is None else (json.loads(row[0]), float(row[1]))

    def finished_dp(self, up_to: int) -> list[dict[str, Any]]:
        """The terms of every finished DP round with an id <= ``up_to``, oldest first."""
        return [json.loads(r[0]) for r in self._all(
            "SELECT d.terms FROM round_dp d JOIN rounds r ON r.round_id = d.round_id "
            "WHERE r.status='finished' AND d.round_id<=? ORDER BY d.round_id", (up_to,))]

    def latest_version(self) -> int | None:
        """The newest router version's number (no blob read), or None."""
        row = self._one("SELECT MAX(version) AS v FROM router_versions")
        return None if row is None or row["v"] is None else int(row["v"])

    # -- audit ---------------------------------------------------------------------------------
    def audit(self, actor: str, action: str, **detail: Any) -> None:
        """Append one audit record."""
        self._write("INSERT INTO audit(ts, actor, action, detail) VALUES (?,?,?,?)",
                    (time.time(), actor, action, json.dumps(detail, default=str)))

    def auditor_items(self, auditor: str, since: float) -> int:
        """Items ``auditor`` had scored since ``since`` (older rows are dropped here)."""
        self._write("DELETE FROM auditor_items WHERE at < ?", (since,))
        row = self._one("SELECT COALESCE(SUM(items), 0) AS n FROM auditor_items "
                        "WHERE auditor = ?", (auditor,))
        return int(row["n"]) if row is not None else 0

    def charge_auditor(self, auditor: str, items: int) -> None:
        """Record ``items`` scored for ``auditor`` now."""
        self._write("INSERT INTO auditor_items(auditor, at, items) VALUES (?,?,?)",
                    (auditor, time.time(), items))

    def audit_log(self) -> list[dict[str, Any]]:
        """All audit records, oldest first."""
        return [dict(r) for r in self._all("SELECT * FROM audit ORDER BY id")]

    # -- the aligner's online router ----------------------------------------------------------
    def save_online(self, method: str, router_version: int, run: str, step: int | None,
                    last_loss: float | None, state: bytes) -> None:
        """Keep the online router's state (durable before the feedback is acknowledged)."""
        self._write("INSERT OR REPLACE INTO online_router VALUES (?,?,?,?,?,?,?)",
                    (method, router_version, run, step, last_loss, state, time.time()))

    def online(self, method: str) -> dict[str, Any] | None:
        """The saved online router of ``method``, or None."""
        row = self._one("SELECT * FROM online_router WHERE method=?", (method,))
        return None if row is None else dict(row)

    # -- reward broker -------------------------------------------------------------------------
    def put_images(self, images: dict[str, bytes]) -> None:
        """Keep images the broker may need to resend (one transaction: one fsync)."""
        with self.transaction():
            fresh = [(h, d) for h, d in images.items()
                     if self._one("SELECT 1 FROM images WHERE sha256=?", (h,)) is None]
            self._db.executemany("INSERT OR IGNORE INTO images(sha256, data, stored_at) "
                                 "VALUES (?,?,?)", [(h, d, time.time()) for h, d in fresh])

    def image(self, sha256: str) -> bytes | None:
        """An image by hash, or None."""
        row = self._one("SELECT data FROM images WHERE sha256=?", (sha256,))
        return None if row is None else bytes(row["data"])

    def mark_cached(self, client_id: str, hashes: list[str]) -> None:
        """Remember that a client holds these images (no fsync when it already did)."""
        with self.transaction():
            self._db.executemany("INSERT OR IGNORE INTO client_images VALUES (?,?)",
                                 [(client_id, h) for h in hashes])

    def forget_cached(self, client_id: str, hashes: list[str]) -> None:
        """The client says it lacks these images after all."""
        with self.transaction():
            self._db.executemany("DELETE FROM client_images WHERE client_id=? AND sha256=?",
                                 [(client_id, h) for h in hashes])

    def cached(self, client_id: str, among: list[str] | None = None) -> set[str]:
        """Hashes of the images a client is known to hold (only those in ``among`` if given:
        a query looks up its own images, not the client's whole cache)."""
        if among is None:
            rows = self._all("SELECT sha256 FROM client_images WHERE client_id=?", (client_id,))
        else:
            marks = ",".join("?" * len(among))
            rows = self._all(f"SELECT sha256 FROM client_images WHERE client_id=? AND sha256 IN "
                             f"({marks})", (client_id, *among))
        return {r["sha256"] for r in rows}

    def queue_query(self, client_id: str, items: list[dict[str, Any]]) -> int:
        """Queue a pull-mode reward query."""
        return self._write("INSERT INTO reward_queries(client_id, items, status, created_at) "
                           "VALUES (?,?,?,?)",
                           (client_id, json.dumps(items), "pending", time.time()))

    def pending_queries(self, client_id: str) -> list[dict[str, Any]]:
        """A client's unanswered queries, oldest first."""
        rows = self._all("SELECT query_id, items FROM reward_queries WHERE client_id=? AND "
                         "status='pending' ORDER BY query_id", (client_id,))
        return [{"query_id": r["query_id"], "items": json.loads(r["items"])} for r in rows]

    def query(self, query_id: int) -> dict[str, Any] | None:
        """One queued query, or None."""
        row = self._one("SELECT * FROM reward_queries WHERE query_id=?", (query_id,))
        return None if row is None else dict(row)

    def answer_query(self, query_id: int, scores: list[float] | dict[str, Any]) -> None:
        """Store a pull-mode answer."""
        self._write("UPDATE reward_queries SET status='answered', scores=?, answered_at=? "
                    "WHERE query_id=?", (json.dumps(scores), time.time(), query_id))
