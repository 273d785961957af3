"""The audit log's index on ``action`` (the capture-missed gauge counts one action on every
``/metrics`` scrape), on a new store and on a store written before the index existed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from server_app import Store

# The capture-missed gauge's query (server_app._routes._meta).
GAUGE = "SELECT 'capture_missed', COUNT(*) FROM audit WHERE action='capture_missed'"


def _plan(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return " ".join(str(r[-1]) for r in db.execute(f"EXPLAIN QUERY PLAN {GAUGE}"))


def test_a_new_store_counts_an_audit_action_through_its_index(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    for i in range(3):
        store.audit("server", "capture_missed", round_id=i)
    store.audit("op", "round_created", round_id=9)
    assert "USING COVERING INDEX audit_action" in _plan(tmp_path / "s.db")
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute(GAUGE).fetchone() == ("capture_missed", 3)


def test_an_older_store_gains_the_index_when_opened_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the audit table as stores before the index wrote it
        db.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, ts REAL NOT NULL, "
                   "actor TEXT NOT NULL, action TEXT NOT NULL, detail TEXT NOT NULL)")
        db.executemany("INSERT INTO audit(ts, actor, action, detail) VALUES (?,?,?,?)",
                       [(1.0, "server", "capture_missed", "{}"), (2.0, "op", "x", "{}")])
    assert "USING COVERING INDEX audit_action" not in _plan(path)
    store = Store(path)
    assert "USING COVERING INDEX audit_action" in _plan(path)
    assert [r.action for r in store.audit_log()] == ["capture_missed", "x"]
    store.audit("server", "capture_missed", round_id=2)
    with sqlite3.connect(path) as db:
        assert db.execute(GAUGE).fetchone() == ("capture_missed", 2)
