"""The server store's plumbing: one SQLite connection behind a lock, transactions that group
writes into one fsync, and stage messages whose commit waits for a group (``flush``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from sdk.storage import SQLiteFile

__all__ = ["Row", "StoreBase"]


@dataclass(frozen=True)
class Row:
    """A typed row of one table: each field is the column of its name, of the type that
    column's affinity stores (None only where the column allows NULL)."""


_R = TypeVar("_R", bound=Row)


def _typed(cls: type[_R], row: sqlite3.Row) -> _R:
    """``row`` as a ``cls``: the one place a stored row gets its type."""
    return cls(**{f.name: row[f.name] for f in fields(cls)})


class StoreBase(SQLiteFile):
    """Thread-safe reads and writes of one SQLite file; the tables' methods build on these."""

    def __init__(self, path: Path | str, schema: str) -> None:
        # FULL: an ack must survive a power cut, not only a process kill.
        super().__init__(path, schema, synchronous="FULL")
        self._db.row_factory = sqlite3.Row
        # Group commit: stage messages stored with ``defer_commit`` sit in one open transaction
        # until ``flush`` (or any durable write) commits them all with one fsync.
        self._pending = False
        self._depth = 0  # nesting of ``transaction`` blocks

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(sql, args).fetchone()
            return row

    def _row(self, cls: type[_R], sql: str, args: tuple[Any, ...] = ()) -> _R | None:
        """The first row ``sql`` selects, as a ``cls``, or None."""
        row = self._one(sql, args)
        return None if row is None else _typed(cls, row)

    def _rows(self, cls: type[_R], sql: str, args: tuple[Any, ...] = ()) -> list[_R]:
        """Every row ``sql`` selects, each as a ``cls``."""
        return [_typed(cls, r) for r in self._all(sql, args)]

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: it moves when another connection (another
        process) commits, never for this connection's own writes."""
        with self._lock:
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])

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
