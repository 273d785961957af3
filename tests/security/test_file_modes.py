"""Finding 4: both apps create their databases (and -wal/-shm files) owner-only, and refuse to
start on a key or database other users may read unless ``allow_readable_files`` is set."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from client_app import ClientSettings
from client_app._app import create_client_app
from fedmor_local import LocalConsortium
from sdk.storage import backup_sqlite
from sdk.wire import load_or_create_key
from server_app import ServerSettings
from server_app._app import create_app
from tests.security.conftest import PULL, PUSH


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_running_apps_keep_their_files_owner_only(hostile: LocalConsortium) -> None:
    dbs = [Path(hostile.server_cfg["db_path"])] + [
        Path(hostile.client_cfg[n]["db_path"]) for n in (PUSH, PULL)]
    files = [f for db in dbs for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm"))]
    assert all(f.exists() for f in files)
    assert {str(f): oct(_mode(f)) for f in files} == {str(f): "0o600" for f in files}


@pytest.mark.parametrize("target", ["key", "db"])
def test_both_apps_refuse_readable_files(tmp_path: Path, target: str) -> None:
    key, db = tmp_path / "id.pem", tmp_path / "app.db"
    load_or_create_key(key)
    create_app(ServerSettings(db_path=db, identity_key=key))  # creates the store
    readable = key if target == "key" else db
    readable.chmod(0o644)
    with pytest.raises(PermissionError, match=f"{readable.name} has mode 644"):
        create_app(ServerSettings(db_path=db, identity_key=key))
    with pytest.raises(PermissionError, match="other users may read it"):
        create_client_app(ClientSettings(db_path=db, identity_key=key))
    create_app(ServerSettings(db_path=db, identity_key=key, allow_readable_files=True))


def test_the_server_process_exits_with_the_reason(tmp_path: Path) -> None:
    key = tmp_path / "id.pem"
    load_or_create_key(key)
    key.chmod(0o640)
    config = tmp_path / "server.json"
    config.write_text(f'{{"db_path": "{tmp_path / "s.db"}", "identity_key": "{key}", '
                      f'"port": 0, "allow_plain_http": true}}')
    proc = subprocess.run([sys.executable, "-m", "server_app", "--config", str(config)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    assert proc.returncode != 0
    assert "has mode 640: other users may read it" in proc.stdout + proc.stderr
    assert not (tmp_path / "s.db").exists()  # nothing was created


_OPENED: dict[str, int | None] = {}  # backup path -> its mode when SQLite opened it


def _note_mode(event: str, args: tuple[object, ...]) -> None:
    if event == "sqlite3.connect" and args and str(args[0]) in _OPENED:
        path = Path(str(args[0]))
        _OPENED[str(path)] = stat.S_IMODE(path.stat().st_mode) if path.exists() else None


sys.addaudithook(_note_mode)  # a real hook on SQLite's open, not a stand-in


def test_a_backup_is_0600_from_its_creation(tmp_path: Path) -> None:
    db = tmp_path / "client.db"
    sqlite3.connect(db).execute("CREATE TABLE t (secret TEXT)").connection.commit()
    out = tmp_path / "backup.db"
    _OPENED[str(out)] = -1
    old = os.umask(0)  # the most permissive umask: only the mode given at creation counts
    try:
        backup_sqlite(db, out)
    finally:
        os.umask(old)
    assert _OPENED[str(out)] == 0o600  # already 0600 when SQLite opened it to copy into
    assert _mode(out) == 0o600
