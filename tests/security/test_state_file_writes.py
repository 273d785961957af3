"""State files (the roster, the capture manifest, the profiles book) are replaced whole through
a fresh file beside them, never through a fixed temporary name: a name planted there by anyone
who can write the folder (a link to another of the user's files) is never opened, so the file
it points to is never overwritten."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.capture import write_capture
from sdk.membership import RosterFile, add_to_roster
from sdk.storage import replace_file
from sdk.wire import generate_key, public_key_b64
from tests.apps.conftest import enrolled_team

VICTIM = "the user's own file\n"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "authorized_keys"
    path.parent.mkdir()
    path.write_text(VICTIM)
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _plant(link: Path, victim: Path) -> None:
    """The old fixed temporary name, as a link to ``victim``."""
    link.symlink_to(victim)


def _leftovers(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f".{name}.*.tmp"))


def test_a_roster_save_does_not_follow_a_planted_temporary_name(
        tmp_path: Path, victim: Path) -> None:
    roster = tmp_path / "roster.json"
    add_to_roster(roster, name="st-mary", public_key=public_key_b64(generate_key()))
    _plant(tmp_path / "roster.json.tmp", victim)
    add_to_roster(roster, name="city-bank", public_key=public_key_b64(generate_key()))
    assert victim.read_text() == VICTIM
    assert not roster.is_symlink()
    assert [c.name for c in RosterFile.load(roster).clients] == ["st-mary", "city-bank"]
    assert not _leftovers(tmp_path, "roster.json")


def test_the_servers_roster_rollback_does_not_follow_a_planted_temporary_name(
        tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that refuses an added identity puts the roster file's old bytes back, through a
    fresh file too."""
    team = enrolled_team(tmp_path, {"ops": "operator"})
    roster = tmp_path / "roster.json"
    before = roster.read_bytes()
    _plant(tmp_path / "roster.json.tmp", victim)

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    store = team["ops"].tc.app.state.store  # type: ignore[attr-defined]
    monkeypatch.setattr(store, "upsert_roster", refuse)
    with pytest.raises(sqlite3.OperationalError):
        team["ops"].call("POST", "/v1/roster",
                         {"name": "st-john", "public_key": public_key_b64(generate_key())})
    assert roster.read_bytes() == before
    assert victim.read_text() == VICTIM
    assert not _leftovers(tmp_path, "roster.json")


def test_a_capture_manifest_does_not_follow_a_planted_temporary_name(
        tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "capture"
    manifest = write_capture(root, description="first")
    _plant(root / "manifest.json.tmp", victim)
    assert write_capture(root) == manifest
    assert victim.read_text() == VICTIM
    assert not manifest.is_symlink()
    assert json.loads(manifest.read_text())["description"] == "first"
    assert not _leftovers(root, "manifest.json")


@pytest.mark.usefixtures("umask_022")
def test_the_new_file_takes_the_mode_given_less_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    path.chmod(0o644)
    replace_file(path, "private")
    assert path.read_text() == "private" and _mode(path) == 0o600
    replace_file(path, b"shared", mode=RosterFile.FILE_MODE)
    assert path.read_bytes() == b"shared" and _mode(path) == 0o644


def test_a_failed_replace_leaves_the_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir()  # the rename over a folder fails after the bytes are written
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        replace_file(target, "new")
    assert (target / "inside").read_text() == "kept"
    assert not _leftovers(tmp_path, "state")
