"""The server's SQLite store (WAL): every acknowledged fact is committed before the ack.

One file, one schema (below); the methods are grouped by concern: identities
(``_identities``), rounds (``_rounds``), the reward path (``_rewards``) and
the operator console's logins (``_console``),
over the connection and transaction plumbing of ``_base``.
"""

from __future__ import annotations

import time
from pathlib import Path

from sdk.serving import ConflictError
from sdk.storage import Retention
from server_app._store._console import ConsoleTables, ConsoleTokenRow
from server_app._store._identities import (
    AuditRow,
    ClientRow,
    IdentityTables,
    RevokedRow,
    RosterRow,
)
from server_app._store._rewards import OnlineRouterRow, QueryRow, QueuedQuery, RewardTables
from server_app._store._rounds import (
    LineageRow,
    RoundRow,
    RoundTables,
    VersionMeta,
    VersionRow,
    payload_record,
)

__all__ = [
    "AuditRow",
    "ClientRow",
    "ConflictError",
    "ConsoleTokenRow",
    "LineageRow",
    "OnlineRouterRow",
    "QueryRow",
    "QueuedQuery",
    "RevokedRow",
    "RosterRow",
    "RoundRow",
    "Store",
    "VersionMeta",
    "VersionRow",
    "payload_record",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS key_rotations (client_id TEXT NOT NULL,
    old_key TEXT NOT NULL, new_key TEXT NOT NULL, at REAL NOT NULL, endorsement TEXT NOT NULL,
    PRIMARY KEY (client_id, old_key));
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
    router_version INTEGER, error TEXT, created_at REAL NOT NULL, finished_at REAL,
    captured INTEGER NOT NULL DEFAULT 0);
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
-- one row per router configuration the consortium declared, in order; the newest is current
CREATE TABLE IF NOT EXISTS router_lineages (
    lineage INTEGER PRIMARY KEY, sha256 TEXT NOT NULL, num_params INTEGER NOT NULL,
    config TEXT NOT NULL, created_at REAL NOT NULL, actor TEXT NOT NULL);
-- no AUTOINCREMENT (rows are never deleted, so ids still only grow): it cost a write of
-- the sqlite_sequence page with every record
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, ts REAL NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, detail TEXT NOT NULL);
-- /metrics counts one action on every scrape (capture_missed): no scan of the whole log.
-- The schema runs at every open, so an older store gains the index then.
CREATE INDEX IF NOT EXISTS audit_action ON audit (action);
-- a member's site policy refused the round: it sends nothing more there
CREATE TABLE IF NOT EXISTS round_refusals (
    round_id INTEGER NOT NULL, client_id TEXT NOT NULL, reason TEXT NOT NULL,
    detail TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (round_id, client_id));
-- a DP round's terms (sdk.wire.DPTerms as JSON) and its own epsilon, fixed at creation
CREATE TABLE IF NOT EXISTS round_dp (
    round_id INTEGER PRIMARY KEY, terms TEXT NOT NULL, epsilon REAL NOT NULL);
-- revoked identities (server_app._identity._identities): a (name, roster key) pair never comes back
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
-- items each auditor had scored (server_app._routes._audit's budget; survives a restart)
CREATE TABLE IF NOT EXISTS auditor_items (
    auditor TEXT NOT NULL, at REAL NOT NULL, items INTEGER NOT NULL);
-- each applied aligner feedback step (the operator console's alignment progress)
CREATE TABLE IF NOT EXISTS alignment_steps (
    run TEXT NOT NULL, step INTEGER NOT NULL, loss REAL NOT NULL, reward REAL, kl REAL,
    feedback REAL, at REAL NOT NULL, PRIMARY KEY (run, step));
-- operator console logins (server_app._console._auth): only the sha256 of each token is kept
CREATE TABLE IF NOT EXISTS console_tokens (
    token_sha256 TEXT PRIMARY KEY, kind TEXT NOT NULL, operator TEXT NOT NULL,
    expires_at REAL NOT NULL, used_at REAL);
CREATE TABLE IF NOT EXISTS reward_queries (
    query_id INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT NOT NULL, items TEXT NOT NULL,
    status TEXT NOT NULL, scores TEXT, created_at REAL NOT NULL, answered_at REAL);
"""


class Store(IdentityTables, RoundTables, RewardTables, ConsoleTables):
    """Thread-safe access to the server's SQLite file; one connection guarded by a lock."""

    def __init__(self, path: Path | str, *,
                 images_bytes: int = Retention().images_bytes) -> None:
        super().__init__(path, _SCHEMA)
        self.images_bytes = images_bytes  # the image cache's bound ([retention] images_bytes)
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(clients)")}
        if "clip_bound" not in columns:  # a store created before members announced it
            self._db.execute("ALTER TABLE clients ADD COLUMN clip_bound REAL")
        self._add_role_columns()
        # A member's announced round terms (sdk.wire RoundTerms as JSON; NULL: none yet).
        self.add_column("clients", "round_terms", "TEXT")
        # A member's starts as it announces them (``POST /v1/identity/status``): when it last
        # started cleanly, how often it started again, the round open then, and the problem
        # that kept it from starting (NULL: none known).
        self.add_column("clients", "started_at", "REAL")
        self.add_column("clients", "restarts", "INTEGER NOT NULL DEFAULT 0", fill=0)
        self.add_column("clients", "restarted_in_round", "INTEGER")
        self.add_column("clients", "problem", "TEXT")
        # How a round went on after a server restart (NULL: it never had to).
        self.add_column("rounds", "resumed", "TEXT")
        self.add_column("images", "stored_at", "REAL", fill=time.time())  # for retention
        # Whether a round is captured is fixed when it opens (what its members agreed to);
        # rounds of a store older than that record were announced uncaptured or unknown:
        # never captured.
        self.add_column("rounds", "captured", "INTEGER NOT NULL DEFAULT 0", fill=0)
        # Versions published before router lineages existed belong to none (NULL).
        self.add_column("router_versions", "lineage", "INTEGER")
        # Where a version without a round came from: a rollback's restored version, or the
        # earlier lineage's version a new lineage carried over (both NULL: published).
        self.add_column("router_versions", "restored", "INTEGER")
        self.add_column("router_versions", "carried_from", "INTEGER")

    def _add_role_columns(self) -> None:
        """A store written before roles existed: every identity in it is a member."""
        for table in ("roster", "clients"):
            columns = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if "role" not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN role TEXT NOT NULL "
                                 "DEFAULT 'member'")
