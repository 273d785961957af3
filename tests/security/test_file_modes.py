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


_OPENED: dict[str, list[int | None]] = {}  # folder -> modes of the files SQLite opened there


def _note_mode(event: str, args: tuple[object, ...]) -> None:
    if event == "sqlite3.connect" and args and str(Path(str(args[0])).parent) in _OPENED:
        path = Path(str(args[0]))
        _OPENED[str(path.parent)].append(
            stat.S_IMODE(path.stat().st_mode) if path.exists() else None)


sys.addaudithook(_note_mode)  # a real hook on SQLite's open, not a stand-in


def test_a_backup_is_0600_from_its_creation(tmp_path: Path) -> None:
    db = tmp_path / "client.db"
    sqlite3.connect(db).execute("CREATE TABLE t (secret TEXT)").connection.commit()
    out = tmp_path / "backups" / "backup.db"
    out.parent.mkdir()
    _OPENED[str(out.parent)] = []
    old = os.umask(0)  # the most permissive umask: only the mode given at creation counts
    try:
        backup_sqlite(db, out)
    finally:
        os.umask(old)
    # Every file SQLite opened to copy into was already 0600.
    assert _OPENED[str(out.parent)] == [0o600]
    assert _mode(out) == 0o600


def test_a_failed_backup_leaves_no_file_and_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.cli import main

    config, out = tmp_path / "server.toml", tmp_path / "backups" / "server.db"
    wrong = tmp_path / "notes.txt"  # db_path names a file that is not the app's database
    wrong.write_text("not a database " * 100)
    config.write_text(f'db_path = "{wrong}"\n')
    assert main(["server", "backup", str(out), "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fedmor: error: {wrong} is not a SQLite database"), err
    assert "db_path" in err and len(err.splitlines()) == 1
    # Nothing that looks like a backup, and nothing that blocks the next try.
    assert list(out.parent.iterdir()) == []
    db = tmp_path / "server.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.commit()
    config.write_text(f'db_path = "{db}"\n')
    assert main(["server", "backup", str(out), "--config", str(config)]) == 0
    kept = out.read_bytes()
    capsys.readouterr()
    # An existing backup is kept, and the refusal is one line.
    assert main(["server", "backup", str(out), "--config", str(config)]) == 1
    assert capsys.readouterr().err == f"fedmor: error: {out} exists; refusing to overwrite it\n"
    assert out.read_bytes() == kept and list(out.parent.iterdir()) == [out]
