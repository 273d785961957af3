"""The harness (and with it ``fedmor demo --out runs/x``) works from any folder: the apps run
from the checkout, so a relative run directory must reach them as an absolute path."""

from pathlib import Path

import pytest

from fedmor_local import LocalConsortium


def test_a_relative_workdir_starts_from_another_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with LocalConsortium(Path("runs") / "here", 1, demo=True) as c:
        c.start()
        c.wait_enrolled()
        assert c.dir == tmp_path / "runs" / "here"
        assert (c.dir / "server.json").is_file() and len(c.enrolled()) == 1


def test_waiting_for_enrollment_ends_when_a_client_exits(tmp_path: Path) -> None:
    # The wait follows the processes, not a clock: a client that cannot start ends it at once,
    # naming its log, where a fixed deadline would fail a slow but healthy start.
    with LocalConsortium(tmp_path, 2, demo=True) as c:
        c.start_server()
        c.start_client("site-0", wait=False)
        c.start_client("site-1", wait=False,
                       router_training={"pairs_dir": str(tmp_path / "no-such-folder")})
        with pytest.raises(RuntimeError, match=r"site-1 exited with \d+ .*site-1\.log"):
            c.wait_enrolled()
