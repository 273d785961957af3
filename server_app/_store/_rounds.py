"""The server store's rounds: round rows, stage messages and closures, refusals, DP terms and
the router versions rounds publish."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from sdk.serving import ConflictError
from sdk.wire import DPTerms, Refusal, StagePayload
from server_app._store._base import StoreBase

__all__ = ["LineageRow", "RoundRow", "RoundTables", "VersionMeta", "VersionRow",
           "payload_record"]


@dataclass(frozen=True, slots=True)
class RoundRow:
    """One round as stored; ``spec``: its ``RoundSpec`` JSON text (``"{}"`` until the round
    started), left undecoded: whoever needs the spec decodes it once and keeps it."""

    round_id: int
    kind: str
    spec: str
    status: str
    stage_index: int
    stage_opened_at: float
    router_version: int | None
    error: str | None
    created_at: float
    finished_at: float | None
    captured: bool  # announced when the round opened; never changed by a later setting
    resumed: str | None  # how the round went on after server restarts (None: it never had to)

    @classmethod
    def of(cls, row: sqlite3.Row) -> RoundRow:
        """The typed form of a ``SELECT * FROM rounds`` row."""
        return cls(**{**dict(row), "captured": bool(row["captured"])})


@dataclass(frozen=True, slots=True)
class VersionMeta:
    """A router version without its parameters; ``restored``: the version a rollback
    published again, ``carried_from``: the earlier lineage's version a new lineage carried
    over (both None: a round or the operator published it)."""

    version: int
    round_id: int | None
    sha256: str
    length: int
    size_bytes: int
    created_at: float
    lineage: int | None
    restored: int | None
    carried_from: int | None


@dataclass(frozen=True, slots=True)
class VersionRow(VersionMeta):
    """A router version with its parameters (little-endian float32)."""

    blob: bytes


@dataclass(frozen=True, slots=True)
class LineageRow:
    """A router configuration the consortium declared (``config``: its JSON)."""

    lineage: int
    sha256: str
    num_params: int
    config: str
    created_at: float
    actor: str


_META = ("version, round_id, sha256, length, LENGTH(blob) AS size_bytes, created_at, lineage, "
         "restored, carried_from")


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


class RoundTables(StoreBase):
    """Rounds and what their stages stored."""

    def create_round(self, kind: str, spec: dict[str, Any], *, captured: bool = False) -> int:
        """Insert an open round at stage 0; ``captured``: the server captures it (announced to
        its members, and never changed by a later setting)."""
        now = time.time()
        return self._write(
            "INSERT INTO rounds(kind, spec, status, stage_index, stage_opened_at, created_at, "
            "captured) VALUES (?,?,?,?,?,?,?)",
            (kind, json.dumps(spec), "open", 0, now, now, int(captured)))

    def round_row(self, round_id: int) -> RoundRow | None:
        """One round, or None (its spec undecoded: a round reads its row hundreds of times)."""
        row = self._one("SELECT * FROM rounds WHERE round_id=?", (round_id,))
        return None if row is None else RoundRow.of(row)

    def round_rows(self, status: str | None = None) -> list[RoundRow]:
        """All rounds (optionally with one status), oldest first, in one query."""
        return [RoundRow.of(r) for r in self._all("SELECT * FROM rounds WHERE ?1 IS NULL OR "
                                                  "status=?1 ORDER BY round_id", (status,))]

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

    def put_closure(self, round_id: int, stage: str,
                    broadcast: dict[str, dict[str, Any]]) -> None:
        """Record that a stage closed and what the server sends each client next."""
        self._write("INSERT OR REPLACE INTO stage_closures VALUES (?,?,?,?)",
                    (round_id, stage, json.dumps(broadcast), time.time()))

    def closure(self, round_id: int, stage: str) -> dict[str, dict[str, Any]] | None:
        """The broadcast recorded when a stage closed (each client's next input, its wire
        JSON), or None if still open."""
        row = self._one("SELECT broadcast FROM stage_closures WHERE round_id=? AND stage=?",
                        (round_id, stage))
        return None if row is None else dict(json.loads(row["broadcast"]))

    def delete_round_state(self, round_id: int) -> None:
        """Forget one round's messages and closures (a clean restart of an open round)."""
        with self.transaction():
            self._db.execute("DELETE FROM stage_messages WHERE round_id=?", (round_id,))
            self._db.execute("DELETE FROM stage_closures WHERE round_id=?", (round_id,))

    # -- router versions and lineages ---------------------------------------------------------
    def add_version(self, round_id: int | None, blob: bytes, length: int,
                    lineage: int | None = None, *, restored: int | None = None,
                    carried_from: int | None = None) -> int:
        """Store a router version of ``lineage`` (None: the server declares no router
        configuration); ``restored``: the version a rollback publishes again;
        ``carried_from``: the version a new lineage carries over. Returns its number."""
        digest = hashlib.sha256(blob).hexdigest()
        return self._write("INSERT INTO router_versions(round_id, sha256, length, blob, "
                           "created_at, lineage, restored, carried_from) "
                           "VALUES (?,?,?,?,?,?,?,?)",
                           (round_id, digest, length, blob, time.time(), lineage, restored,
                            carried_from))

    def version(self, version: int | None = None) -> VersionRow | None:
        """One router version, blob included; None: the latest of the current lineage (of
        all versions while no lineage exists)."""
        select = f"SELECT {_META}, blob FROM router_versions "
        if version is not None:
            row = self._one(select + "WHERE version=?", (version,))
        elif (current := self.lineage()) is None:
            row = self._one(select + "ORDER BY version DESC LIMIT 1")
        else:
            row = self._one(select + "WHERE lineage=? ORDER BY version DESC LIMIT 1",
                            (current.lineage,))
        return None if row is None else VersionRow(**dict(row))

    def versions(self) -> list[VersionMeta]:
        """Every router version's metadata (no blob), oldest first."""
        return [VersionMeta(**dict(r)) for r in self._all(
            f"SELECT {_META} FROM router_versions ORDER BY version")]

    def version_meta(self, lineage: int | None = None, *,
                     version: int | None = None) -> VersionMeta | None:
        """Version ``version``, or the newest of ``lineage`` (of all versions when both are
        None), without its blob."""
        where, args = ("", ()) if lineage is None else ("WHERE lineage=? ", (lineage,))
        if version is not None:
            where, args = "WHERE version=? ", (version,)
        row = self._one(f"SELECT {_META} FROM router_versions {where}ORDER BY version DESC "
                        "LIMIT 1", args)
        return None if row is None else VersionMeta(**dict(row))

    def lineage_versions(self) -> dict[int, tuple[int, int]]:
        """(first, latest) version of each lineage that has one."""
        return {int(r[0]): (int(r[1]), int(r[2])) for r in self._all(
            "SELECT lineage, MIN(version), MAX(version) FROM router_versions "
            "WHERE lineage IS NOT NULL GROUP BY lineage")}

    def carried_lineage(self, lineage: int) -> LineageRow | None:
        """The lineage whose version ``lineage``'s first version carried over, or None."""
        row = self._one("SELECT l.* FROM router_versions v JOIN router_versions s ON "
                        "s.version = v.carried_from JOIN router_lineages l ON "
                        "l.lineage = s.lineage WHERE v.lineage=? ORDER BY v.version LIMIT 1",
                        (lineage,))
        return None if row is None else LineageRow(**dict(row))

    def trained_in(self, lineage: int, up_to: int) -> set[str]:
        """Client ids that took part in a finished round of ``lineage`` whose version is at
        most ``up_to`` (a participant that did not refuse it)."""
        rows = self._all("SELECT r.round_id, r.spec FROM router_versions v JOIN rounds r ON "
                         "r.round_id = v.round_id WHERE v.lineage=? AND v.version<=?",
                         (lineage, up_to))
        out: set[str] = set()
        for row in rows:
            refused = {r["client_id"] for r in self._all(
                "SELECT client_id FROM round_refusals WHERE round_id=?", (row["round_id"],))}
            out |= set(json.loads(row["spec"]).get("participants", [])) - refused
        return out

    def add_lineage(self, sha256: str, num_params: int, config: str, actor: str) -> int:
        """Start a router lineage (it becomes the current one); returns its number."""
        return self._write("INSERT INTO router_lineages(sha256, num_params, config, "
                           "created_at, actor) VALUES (?,?,?,?,?)",
                           (sha256, num_params, config, time.time(), actor))

    def lineage(self, lineage: int | None = None) -> LineageRow | None:
        """One router lineage (the current, newest one when ``lineage`` is None), or None."""
        row = (self._one("SELECT * FROM router_lineages ORDER BY lineage DESC LIMIT 1")
               if lineage is None else
               self._one("SELECT * FROM router_lineages WHERE lineage=?", (lineage,)))
        return None if row is None else LineageRow(**dict(row))

    def lineages(self) -> list[LineageRow]:
        """Every router lineage, oldest first."""
        return [LineageRow(**dict(r))
                for r in self._all("SELECT * FROM router_lineages ORDER BY lineage")]

    def adopt_versions(self, lineage: int) -> None:
        """Put the versions published before any lineage existed into ``lineage``."""
        self._write("UPDATE router_versions SET lineage=? WHERE lineage IS NULL", (lineage,))

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

    def refusals(self, round_id: int) -> list[Refusal]:
        """The round's refusals, oldest first."""
        return [Refusal.model_validate(dict(r)) for r in self._all("SELECT client_id, reason, detail, at FROM "
                                           "round_refusals WHERE round_id=? ORDER BY at",
                                           (round_id,))]

    def put_round_dp(self, round_id: int, terms: DPTerms, epsilon: float) -> None:
        """Record a DP round's terms and its own epsilon."""
        self._write("INSERT OR REPLACE INTO round_dp VALUES (?,?,?)",
                    (round_id, terms.model_dump_json(), epsilon))

    def round_dp(self, round_id: int) -> tuple[DPTerms, float] | None:
        """(terms, epsilon) of a DP round, or None."""
        row = self._one("SELECT terms, epsilon FROM round_dp WHERE round_id=?", (round_id,))
        return None if row is None else (DPTerms.model_validate_json(row[0]), float(row[1]))

    def finished_dp(self, up_to: int) -> list[DPTerms]:
        """The terms of every finished DP round with an id <= ``up_to``, oldest first."""
        return [DPTerms.model_validate_json(r[0]) for r in self._all(
            "SELECT d.terms FROM round_dp d JOIN rounds r ON r.round_id = d.round_id "
            "WHERE r.status='finished' AND d.round_id<=? ORDER BY d.round_id", (up_to,))]

    def finished_dp_rounds(self) -> list[int]:
        """The ids of the finished DP rounds, oldest first."""
        return [int(r[0]) for r in self._all(
            "SELECT d.round_id FROM round_dp d JOIN rounds r ON r.round_id = d.round_id "
            "WHERE r.status='finished' ORDER BY d.round_id")]

    def latest_version(self) -> int | None:
        """The newest router version's number in the current lineage (no blob read), or
        None."""
        current = self.lineage()
        row = (self._one("SELECT MAX(version) AS v FROM router_versions") if current is None
               else self._one("SELECT MAX(version) AS v FROM router_versions WHERE lineage=?",
                              (current.lineage,)))
        return None if row is None or row["v"] is None else int(row["v"])
