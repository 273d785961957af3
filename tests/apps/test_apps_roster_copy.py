"""Members that check rounds against their own roster copy follow a peer's key rotation by
themselves: nobody sends them a new file, they accept the new key only along the old key's
endorsement (published by the server), and remember it across a restart."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from client_app._demo import demo_params
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.wire import key_fingerprint, load_private_key, public_key_b64

_REPO = Path(__file__).resolve().parents[2]


def _followed(c: LocalConsortium, name: str) -> list[dict[str, object]]:
    with sqlite3.connect(c.client_cfg[name]["db_path"]) as db:
        row = db.execute("SELECT value FROM kv WHERE key='followed_rotations'").fetchone()
    return [] if row is None else list(json.loads(row[0]))


def test_a_rotation_reaches_members_that_keep_their_own_roster_copy(tmp_path: Path) -> None:
    with LocalConsortium(tmp_path, 3, demo=True, policy=OPEN_POLICY,
                         server={"stage_deadline_s": 60.0}) as c:
        copies = {}
        for name in c.names:  # each site's copy of the operator's file, which it alone reads
            copies[name] = tmp_path / name / "roster-copy.json"
            shutil.copy(tmp_path / "roster.json", copies[name])
            c.client_cfg[name]["roster_file"] = str(copies[name])
        before = {name: path.read_bytes() for name, path in copies.items()}
        c.start()
        c.wait_enrolled()

        rotating = c.names[1]
        done = subprocess.run([sys.executable, "-m", "sdk.cli", "client", "rotate-key",
                               "--config", str(tmp_path / f"{rotating}.json")],
                              capture_output=True, text=True, cwd=_REPO, timeout=120)
        assert done.returncode == 0, done.stderr
        new = public_key_b64(load_private_key(Path(c.client_cfg[rotating]["identity_key"])))
        assert new not in before["site-0"].decode()  # the others' copies still name the old key

        info = c.run_round(vector_length=8, min_clients=3, params=demo_params(samples=3),
                           timeout_s=120)
        assert info["dropouts"] == [] and info["refusals"] == []
        assert {name: path.read_bytes() for name, path in copies.items()} == before
        for name in ("site-0", "site-2"):
            followed = _followed(c, name)
            assert [r["new_public_key"] for r in followed] == [new], name
            log = (tmp_path / f"{name}.log").read_text()
            assert f"following the key rotation of {followed[0]['client_id']}" in log
            assert key_fingerprint(new) in log

        # Restarted, a member keeps the record it followed (once) and takes part again.
        c.stop("site-0")
        c.start_client("site-0")
        again = c.run_round(vector_length=8, min_clients=3, params=demo_params(samples=3),
                            timeout_s=120)
        assert again["dropouts"] == []
        assert len(_followed(c, "site-0")) == 1
