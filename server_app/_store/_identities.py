"""The server store's identities: the roster, enrolled clients, revocations, last-seen times,
request nonces and the audit log (what each identity did).

Rows come back as frozen dataclasses (``Row``), except a rotation, which is the wire's
``RotationRecord`` as it stands: a row stays inside the server, so only a row that is a reply
as stored is worth a pydantic model.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from sdk.serving import ConflictError
from sdk.wire import RotationRecord
from server_app._store._base import Row, StoreBase

__all__ = ["AuditRow", "ClientRow", "IdentityTables", "RevokedRow", "RosterRow"]


@dataclass(frozen=True)
class RosterRow(Row):
    """A roster entry: who may enroll, with which key and token (its sha256)."""

    name: str
    public_key: str
    token_sha256: str | None  # None: no token (the name cannot enroll)
    token_used_at: float | None  # None: the token is unused
    role: str


@dataclass(frozen=True)
class ClientRow(Row):
    """An enrolled identity and what it announced since."""

    client_id: str
    name: str
    public_key: str
    reward_url: str | None  # None: pull mode
    enrolled_at: float
    clip_bound: float | None  # None: none announced (its scores cannot be checked)
    role: str
    round_terms: str | None  # sdk.wire.RoundTerms as JSON; None: not announced
    started_at: float | None  # its last clean start; None: none announced
    restarts: int
    restarted_in_round: int | None
    problem: str | None  # what kept it from starting; None: none known


@dataclass(frozen=True)
class RevokedRow(Row):
    """A revocation: the roster key and, if it had enrolled, the identity it had."""

    name: str
    roster_key: str
    client_id: str | None  # None: revoked before it enrolled
    client_key: str | None
    role: str
    enrolled_at: float | None
    at: float
    actor: str
    reason: str


@dataclass(frozen=True)
class AuditRow(Row):
    """One audit record."""

    id: int
    ts: float
    actor: str
    action: str
    detail: str  # a JSON object


class IdentityTables(StoreBase):
    """Who may call the server, who did, and who no longer may."""

    def upsert_roster(self, name: str, public_key: str, token_sha256: str | None,
                      role: str = "member") -> None:
        """Add or update a roster entry; a used token stays used unless the hash changes.
        ``ConflictError`` if another entry's name differs from ``name`` only by case or holds
        ``public_key`` (one key, one identity)."""
        with self._lock:
            clash = self._one("SELECT name FROM roster WHERE name != ? AND (name = ? COLLATE "
                              "NOCASE OR public_key = ?)", (name, name, public_key))
            if clash is not None:
                raise ConflictError(f"roster entry {clash['name']!r} has the same name but for "
                                    f"case, or the same public key, as {name!r}")
            self._write(
                "INSERT INTO roster(name, public_key, token_sha256, role) VALUES (?,?,?,?) "
                "ON CONFLICT(name) DO UPDATE SET public_key=excluded.public_key, "
                "token_used_at=CASE WHEN roster.token_sha256 IS excluded.token_sha256 "
                "THEN roster.token_used_at ELSE NULL END, token_sha256=excluded.token_sha256, "
                "role=excluded.role",
                (name, public_key, token_sha256, role),
            )

    def roster(self) -> list[RosterRow]:
        """All roster entries."""
        return self._rows(RosterRow, "SELECT * FROM roster ORDER BY name")

    def enroll(self, *, name: str, token: str, public_key: str, reward_url: str | None,
               new_id: str, clip_bound: float | None = None) -> tuple[ClientRow, bool]:
        """Consume ``name``'s one-time token and create the client; returns (client, created).

        A retry with the same name and key after success returns the same client (idempotent).
        """
        token_hash = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            entry = self.roster_entry(name)
            if entry is None:
                raise PermissionError(f"client name {name!r} is not in the roster")
            if entry.public_key != public_key:
                raise PermissionError(f"public key does not match the roster entry for {name!r}")
            if entry.token_sha256 != token_hash:
                raise PermissionError(f"wrong enrollment token for {name!r}")
            twin = self._one("SELECT name FROM clients WHERE name != ? AND (name = ? COLLATE "
                             "NOCASE OR public_key = ?)", (name, name, public_key))
            if twin is not None:
                raise ConflictError(f"{twin['name']!r} is enrolled with the same name but for "
                                    f"case, or the same key, as {name!r}")
            existing = self.client_named(name)
            if existing is not None:
                if existing.role != entry.role:
                    raise ConflictError(f"{name!r} is enrolled as {existing.role}, the "
                                        f"roster now says {entry.role}: enroll a new name")
                if existing.public_key == public_key:
                    return existing, False
                raise ConflictError(f"{name!r} is already enrolled with another key")
            if entry.token_used_at is not None:
                raise PermissionError(f"enrollment token for {name!r} was already used")
            now = time.time()
            with self.transaction():
                self._db.execute("UPDATE roster SET token_used_at=? WHERE name=?", (now, name))
                self._db.execute(
                    "INSERT INTO clients(client_id, name, public_key, reward_url, enrolled_at, "
                    "clip_bound, role) VALUES (?,?,?,?,?,?,?)",
                    (new_id, name, public_key, reward_url, now, clip_bound, entry.role))
            row = self.client(new_id)
            assert row is not None
            return row, True

    def client(self, client_id: str) -> ClientRow | None:
        """One enrolled client, or None."""
        return self._row(ClientRow, "SELECT * FROM clients WHERE client_id=?", (client_id,))

    def clients(self, role: str | None = "member") -> list[ClientRow]:
        """Enrolled identities with ``role`` (default: the members; None: all), oldest
        first."""
        return self._rows(ClientRow, "SELECT * FROM clients WHERE ?1 IS NULL OR role=?1 "
                                     "ORDER BY enrolled_at", (role,))

    def roster_entry(self, name: str) -> RosterRow | None:
        """``name``'s roster entry, or None."""
        return self._row(RosterRow, "SELECT * FROM roster WHERE name=?", (name,))

    def client_named(self, name: str) -> ClientRow | None:
        """The enrolled identity called ``name``, or None."""
        return self._row(ClientRow, "SELECT * FROM clients WHERE name=?", (name,))

    def key_owner(self, public_key: str, *, besides: str) -> str | None:
        """The name of an identity other than ``besides`` that enrolled with, or is listed
        under, ``public_key``; None if no other holds it."""
        row = self._one("SELECT name FROM clients WHERE public_key=? UNION SELECT name FROM "
                        "roster WHERE public_key=? AND name!=?", (public_key, public_key, besides))
        return None if row is None else str(row["name"])

    def set_public_key(self, client_id: str, name: str, *, old: str, new: str,
                       endorsement: str) -> None:
        """A rotation: ``client_id`` (roster name ``name``) signs with ``new`` from now; the
        rotation is kept with ``old``'s endorsement of ``new`` (published to members)."""
        with self.transaction():
            self._write("UPDATE clients SET public_key=? WHERE client_id=?", (new, client_id))
            self._write("UPDATE roster SET public_key=? WHERE name=?", (new, name))
            self._write("INSERT OR REPLACE INTO key_rotations VALUES (?,?,?,?,?)",
                        (client_id, old, new, time.time(), endorsement))

    def set_round_terms(self, client_id: str, terms: str) -> bool:
        """``client_id`` announced its round terms (JSON); True when they changed (then
        stored with an audit row, in one commit)."""
        with self.transaction():
            row = self._one("SELECT round_terms FROM clients WHERE client_id=?", (client_id,))
            if row is None:
                raise KeyError(client_id)
            if row["round_terms"] == terms:
                return False
            self._write("UPDATE clients SET round_terms=? WHERE client_id=?", (terms, client_id))
            self.audit(client_id, "round_terms", terms=terms)
        return True

    def set_start(self, client_id: str, problem: str | None, open_round: int | None) -> bool:
        """``client_id`` announced a start: a clean one (``problem`` None) counts a restart
        when it had started before (``open_round``: the round open then) and clears any known
        problem; a refused one keeps ``problem`` until the next clean start. True when it is a
        restart (both audited, in one commit)."""
        with self.transaction():
            row = self._one("SELECT started_at FROM clients WHERE client_id=?", (client_id,))
            if row is None:
                raise KeyError(client_id)
            if problem is not None:
                self._write("UPDATE clients SET problem=? WHERE client_id=?", (problem, client_id))
                self.audit(client_id, "start_refused", problem=problem)
                return False
            restart = row["started_at"] is not None
            self._write("UPDATE clients SET started_at=?, problem=NULL, restarts=restarts+?, "
                        "restarted_in_round=? WHERE client_id=?",
                        (time.time(), int(restart),
                         open_round if restart else None, client_id))
            self.audit(client_id, "started", restart=restart, round_id=open_round)
        return restart

    def set_clip_bound(self, client_id: str, clip_bound: float) -> float | None:
        """``client_id`` announced a new clip bound: store it with an audit row (one commit);
        returns the bound it replaces (the same bound again writes nothing)."""
        with self.transaction():
            row = self._one("SELECT clip_bound FROM clients WHERE client_id=?", (client_id,))
            if row is None:
                raise KeyError(client_id)
            previous = row["clip_bound"]
            if previous == clip_bound:
                return float(previous)
            self._write("UPDATE clients SET clip_bound=? WHERE client_id=?",
                        (clip_bound, client_id))
            self.audit(client_id, "clip_bound", clip_bound=clip_bound, previous=previous)
        return None if previous is None else float(previous)

    def retired_keys(self, client_id: str) -> list[str]:
        """The keys an enrolled identity rotated away from (a revoked one: none, so its
        requests keep their 403)."""
        return [str(r["old_key"]) for r in self._all(
            "SELECT old_key FROM key_rotations WHERE client_id=? AND client_id IN (SELECT "
            "client_id FROM clients)", (client_id,))]

    def key_rotations(self) -> list[RotationRecord]:
        """Every rotation, oldest first."""
        return [RotationRecord.model_validate(dict(r)) for r in self._all(
            "SELECT client_id, old_key AS old_public_key, new_key AS new_public_key, at, "
            "endorsement FROM key_rotations ORDER BY at")]

    # -- revocations and last-seen times ---------------------------------------------------------
    def revoke(self, name: str, *, roster_key: str, client: ClientRow | None, role: str,
               actor: str, reason: str) -> None:
        """Record ``name``'s revocation (its roster key and, if enrolled, its ``client`` row)
        and drop it from the roster and the enrolled identities, in one commit."""
        with self.transaction():
            self._write(
                "INSERT OR REPLACE INTO revocations(name, roster_key, client_id, client_key, "
                "role, enrolled_at, at, actor, reason) VALUES (?,?,?,?,?,?,?,?,?)",
                (name, roster_key, None if client is None else client.client_id,
                 None if client is None else client.public_key, role,
                 None if client is None else client.enrolled_at, time.time(), actor, reason))
            self._write("DELETE FROM roster WHERE name=?", (name,))
            self._write("DELETE FROM clients WHERE name=?", (name,))

    def revoked_pairs(self) -> set[tuple[str, str]]:
        """Every revoked (name, roster key) pair: none of them comes back from a roster file."""
        return {(str(r["name"]), str(r["roster_key"]))
                for r in self._all("SELECT name, roster_key FROM revocations")}

    def revoked_client_key(self, client_id: str) -> str | None:
        """The key ``client_id`` enrolled with, if it was revoked (its latest revocation)."""
        row = self._one("SELECT client_key FROM revocations WHERE client_id=? "
                        "ORDER BY at DESC LIMIT 1", (client_id,))
        return None if row is None else str(row["client_key"])

    def revocation(self, name: str) -> RevokedRow | None:
        """``name``'s latest revocation, or None."""
        return self._row(RevokedRow, "SELECT * FROM revocations WHERE name=? ORDER BY at DESC "
                                     "LIMIT 1", (name,))

    def names_of(self, client_ids: set[str]) -> set[str]:
        """The roster names of these client ids, enrolled now or revoked since."""
        rows = [*self._all("SELECT client_id, name FROM clients"),
                *self._all("SELECT client_id, name FROM revocations WHERE client_id IS NOT NULL")]
        return {str(r["name"]) for r in rows if r["client_id"] in client_ids}

    def revocations(self) -> list[RevokedRow]:
        """Every revocation, oldest first."""
        return self._rows(RevokedRow, "SELECT * FROM revocations ORDER BY at")

    def note_seen(self, seen: dict[str, float]) -> None:
        """Keep the latest time each client id was heard from (in one commit)."""
        with self.transaction():
            for client_id, at in seen.items():
                self._write("INSERT INTO last_seen VALUES (?,?) ON CONFLICT(client_id) "
                            "DO UPDATE SET at=MAX(at, excluded.at)", (client_id, at))

    def last_seen(self) -> dict[str, float]:
        """When each client id was last heard from (as of the last ``note_seen``)."""
        return {str(r[0]): float(r[1]) for r in self._all("SELECT * FROM last_seen")}

    def rounds_joined(self) -> dict[str, int]:
        """How many rounds each client id sent a stage message to."""
        return {str(r[0]): int(r[1]) for r in self._all(
            "SELECT client_id, COUNT(DISTINCT round_id) FROM stage_messages GROUP BY client_id")}

    def use_nonce(self, sender: str, nonce: str, ts: float, *, keep_s: float) -> bool:
        """Record a nonce; False if ``sender`` already used it (a replay)."""
        with self._lock:
            if self._db.in_transaction:  # joins the pending group: committed with it (FULL)
                return self.record_nonce(sender, nonce, ts, keep_s=keep_s)
            # Every request records a nonce, so no fsync for it (NORMAL: it survives a process
            # crash, not a power cut). A request replayed after a power cut changes nothing: a
            # stage message gets its original ack, an answered query a 409, a GET reads.
            self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                return self.record_nonce(sender, nonce, ts, keep_s=keep_s)
            finally:
                self._db.execute("PRAGMA synchronous=FULL")
                self.checkpoints.committed()

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

    def reward_items_since(self, since: float) -> dict[str, int]:
        """Reward items the broker asked of each client id since ``since`` (its audit rows)."""
        return {str(r[0]): int(r[1]) for r in self._all(
            "SELECT json_extract(detail, '$.client_id'), SUM(json_extract(detail, '$.items')) "
            "FROM audit WHERE action='reward_query' AND ts >= ? GROUP BY 1", (since,))}

    def audit_log(self) -> list[AuditRow]:
        """All audit records, oldest first."""
        return self._rows(AuditRow, "SELECT * FROM audit ORDER BY id")
