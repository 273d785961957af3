"""A round's capture is fixed when it opens, on real processes: a server restarted with capture
mode flipped while a round is open captures that round exactly as its info announced to the
members, whatever the setting now. Three demo members (the open protocol-test policy: they
agree to be captured); one is kept down so a round stays open across the server's restart."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client_app._demo import demo_params
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.capture import CaptureFiles

LENGTH = 64
ROUND = {"kind": "router_secagg", "vector_length": LENGTH, "min_clients": 3,
         "params": {**demo_params(samples=5), "threshold": 3}}


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    work = tmp_path_factory.mktemp("capfixed")
    with LocalConsortium(work, 3, demo=True, policy=OPEN_POLICY,
                         server={"stage_deadline_s": 60.0}) as c:
        c.start()
        c.wait_enrolled()
        yield c


def _restart_server(c: LocalConsortium, capture: Path | None) -> None:
    c.stop("server")
    if capture is None:
        c.server_cfg.pop("capture", None)
    else:
        c.server_cfg["capture"] = {"enabled": True, "dir": str(capture)}
    c.start_server()


def _open_across_restart(c: LocalConsortium, capture: Path | None) -> dict[str, Any]:
    """Open a round while site-2 is down (it cannot finish), restart the server with capture
    set to ``capture``, bring site-2 back and wait for the round to finish."""
    c.stop("site-2")
    info = c.create_round(**ROUND)
    _restart_server(c, capture)
    c.start_client("site-2")
    reopened = c.round(info["round_id"])
    assert reopened["status"] == "open" and reopened["captured"] is info["captured"]
    done = c.wait_round(info["round_id"], timeout_s=120)
    assert done["status"] == "finished", done
    return info | {"done": done}


def _manifest_rounds(capture: Path, at_least: int) -> set[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (capture / "manifest.json").is_file():
            ids = {r.round_id for r in CaptureFiles.open(capture).manifest.rounds}
            if len(ids) >= at_least:
                return ids
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {at_least} rounds captured in {capture}")


def _audited(c: LocalConsortium, action: str) -> list[int]:
    with sqlite3.connect(c.server_cfg["db_path"]) as db:
        rows = db.execute("SELECT detail FROM audit WHERE action=?", (action,)).fetchall()
    return [int(json.loads(d)["round_id"]) for (d,) in rows]


def test_a_round_opened_uncaptured_stays_uncaptured_when_capture_is_turned_on(
        consortium: LocalConsortium, tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    first = _open_across_restart(consortium, capture)
    assert first["captured"] is False
    assert first["done"]["captured"] is False  # what its members were told, still
    # A round opened now is captured (and so the manifest exists): the first is not in it.
    after = consortium.run_round(**ROUND)
    assert after["captured"] is True
    ids = _manifest_rounds(capture, 1)
    assert after["round_id"] in ids and first["round_id"] not in ids
    assert not (capture / ".pending" / f"round-{first['round_id']:06d}").exists()


def test_a_round_opened_captured_stays_announced_when_capture_is_turned_off(
        consortium: LocalConsortium, tmp_path: Path) -> None:
    """Opened with capture on; the server restarts with it off before the round finishes:
    the info still says captured (its members agreed to that), and the missing capture is not
    silent: a warning, an audit record and the ``/metrics`` gauge."""
    capture = tmp_path / "capture"
    _restart_server(consortium, capture)
    opened = _open_across_restart(consortium, None)
    assert opened["captured"] is True and opened["done"]["captured"] is True
    round_id = opened["round_id"]
    assert round_id in _audited(consortium, "capture_missed")
    log = (consortium.dir / "server.log").read_text(errors="replace")
    assert f"round {round_id} was announced as captured but capture mode is off" in log
    metrics = consortium.admin.get("/metrics").text
    (line,) = [x for x in metrics.splitlines()
               if x.startswith("fedmor_server_capture_missed{")]
    assert line == 'fedmor_server_capture_missed{action="capture_missed"} 1.0'  # this round
    assert not (capture / "manifest.json").exists() or round_id not in {
        r.round_id for r in CaptureFiles.open(capture).manifest.rounds}
    # Listing after another restart (capture still off) keeps the round's announcement.
    _restart_server(consortium, None)
    assert consortium.round(round_id)["captured"] is True


def test_a_store_from_before_the_record_opens_with_its_rounds_uncaptured(tmp_path: Path) -> None:
    """A server store written before rounds recorded their capture: its rounds read as not
    captured (nothing announced them as captured), and new rounds record the flag."""
    from server_app._store import Store

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the rounds table as it was
        db.execute("CREATE TABLE rounds (round_id INTEGER PRIMARY KEY AUTOINCREMENT, "
                   "kind TEXT NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL, "
                   "stage_index INTEGER NOT NULL, stage_opened_at REAL NOT NULL, "
                   "router_version INTEGER, error TEXT, created_at REAL NOT NULL, "
                   "finished_at REAL)")
        db.execute("INSERT INTO rounds(kind, spec, status, stage_index, stage_opened_at, "
                   "created_at) VALUES ('rm_fedavg', '{}', 'finished', 0, 0, 0)")
    store = Store(path)
    try:
        assert store.round_row(1).captured is False  # type: ignore[union-attr]
        new = store.create_round("rm_fedavg", {}, captured=True)
        assert store.round_row(new).captured is True  # type: ignore[union-attr]
    finally:
        store.close()
