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
