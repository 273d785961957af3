"""Retention: both apps purge cached images, reward-query rows and audit rows older than their
``retention`` settings, at start and then in the background, on their real database files; an
open round's audit rows, pending queries and the member's budget window are never purged."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from sdk.storage import DAY_S, Retention
from sdk.wire import RewardAnswer
from server_app import ServerSettings, Store
from server_app._app import create_app


def _sql(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


def _wait_until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the background purge did not run"
        time.sleep(0.05)


def test_the_server_purges_old_rows_at_start_and_in_the_background(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    store = Store(db)
    store.put_images({"old": b"o", "new": b"n"})
    store.mark_cached("c-1", ["old", "new"])
    answered_old, pending_old, answered_new = (store.queue_query("c-1", []).query_id
                                               for _ in range(3))
    store.answer_query(answered_old, RewardAnswer(scores=[1.0]))
    store.answer_query(answered_new, RewardAnswer(scores=[1.0]))
    open_round = store.create_round("router_secagg", {})
    done_round = store.create_round("router_secagg", {})
    store.update_round(done_round, status="finished")
    store.audit("admin", "round_created", round_id=open_round)
    store.audit("admin", "round_created", round_id=done_round)
    store.audit("admin", "router_published", version=1)
    store.close()
    old = time.time() - 400 * DAY_S  # past every default window
    _sql(db, "UPDATE images SET stored_at=? WHERE sha256='old'", (old,))
    _sql(db, "UPDATE reward_queries SET created_at=? WHERE query_id IN (?,?)",
         (old, answered_old, pending_old))
    _sql(db, "UPDATE audit SET ts=?", (old,))
    cfg = ServerSettings(db_path=db, identity_key=tmp_path / "id.pem",
                         retention=Retention(interval_s=0.2))
    with TestClient(create_app(cfg)) as tc:
        # At start: what is past its window is gone, the rest stays.
        assert _sql(db, "SELECT sha256 FROM images") == [("new",)]
        assert _sql(db, "SELECT sha256 FROM client_images") == [("new",)]
        assert sorted(r[0] for r in _sql(db, "SELECT query_id FROM reward_queries")) == [
            pending_old, answered_new]  # a pending query is still awaited, however old
        assert _sql(db, "SELECT json_extract(detail, '$.round_id') FROM audit") == [
            (open_round,)]  # the open round's trail stays
        # Later, in the background: a row that ages past its window goes too.
        tc.app.state.store.audit("admin", "router_published", version=2)  # type: ignore[attr-defined]
        assert len(_sql(db, "SELECT id FROM audit")) == 2
        _sql(db, "UPDATE audit SET ts=? WHERE action='router_published'", (old,))
        _wait_until(lambda: len(_sql(db, "SELECT id FROM audit")) == 1)
        assert tc.get("/v1/health").status_code == 200


def test_a_member_purges_old_images_and_query_log_but_not_its_budget_window(
        tmp_path: Path) -> None:
    db = tmp_path / "client.db"
    store = ClientStore(db)
    store.put_images({"old": b"o"})
    store.put_images({"new": b"n"})
    for query in ("q-old", "q-window", "q-new"):
        store.record_query("server", query, ["h"])
    store.close()
    now = time.time()
    _sql(db, "UPDATE images SET stored_at=? WHERE sha256='old'", (now - 3 * DAY_S,))
    _sql(db, "UPDATE query_audit SET ts=? WHERE query_sha256='q-old'", (now - 3 * DAY_S,))
    _sql(db, "UPDATE query_audit SET ts=? WHERE query_sha256='q-window'", (now - 3600.0,))
    # Windows shorter than the reward budget's (a day): the budget's rows stay all the same.
    retention = Retention(images_days=1, queries_days=0.01, audit_days=0.01, interval_s=0.2)
    cfg = ClientSettings(db_path=db, identity_key=tmp_path / "id.pem",
                         server_url="http://127.0.0.1:9", demo=True, retention=retention)
    with TestClient(create_client_app(cfg, HashScorer())) as tc:
        assert _sql(db, "SELECT sha256 FROM images") == [("new",)]
        assert sorted(r[0] for r in _sql(db, "SELECT query_sha256 FROM query_audit")) == [
            "q-new", "q-window"]
        _sql(db, "UPDATE images SET stored_at=?", (now - 3 * DAY_S,))
        _wait_until(lambda: not _sql(db, "SELECT sha256 FROM images"))
        assert tc.get("/v1/health").status_code == 200


@pytest.mark.parametrize("app", ["server", "member"])
def test_an_image_cache_keeps_at_most_its_bytes_the_newest_first(app: str,
                                                                  tmp_path: Path) -> None:
    """A sender cannot fill the disk between two purges: each new image past the cache's
    ``images_bytes`` pushes the oldest out at once (a sender resends what it needs)."""
    mib = 2**20
    if app == "server":
        server = Store(tmp_path / "s.db", images_bytes=2 * mib)
        store, put = server, (lambda h, d: server.put_images({h: d}))
    else:
        member = ClientStore(tmp_path / "c.db", images_bytes=2 * mib)
        store, put = member, (lambda h, d: member.put_images({h: d}))
    names = [f"image-{n}" for n in range(5)]
    for n, name in enumerate(names):
        put(name, bytes([n]) * (mib // 2 + 1))  # three fit in 2 MiB, four do not
    assert [name for name in names if store.image(name) is not None] == names[2:]
    assert _sql(Path(store.path), "SELECT SUM(length(data)) FROM images")[0][0] <= 2 * mib
    store.close()


def test_retention_settings_refuse_nonsense() -> None:
    for bad in ({"images_days": 0}, {"audit_days": -1}, {"interval_s": 0}, {"days": 3},
                {"images_bytes": 1000}):
        with pytest.raises(ValidationError):
            Retention(**bad)
    assert ServerSettings().retention == Retention() == ClientSettings().retention
