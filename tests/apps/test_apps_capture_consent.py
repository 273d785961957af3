"""Capture needs the members' consent, and survives the server's crash, on real processes: a
server with capture on and four demo members, three of whose site policies agreed to be
captured (``allow_captured_rounds``) and one under the client app's default."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_app._demo import demo_params
from fedmor_local import LocalConsortium
from sdk.capture import CaptureFiles

_REPO = Path(__file__).resolve().parents[2]
LENGTH = 64
AGREED = {"allow_captured_rounds": True}


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    work = tmp_path_factory.mktemp("consent")
    with LocalConsortium(work, 4, demo=True, capture=work / "capture",
                         server={"stage_deadline_s": 30.0}) as c:
        for name in c.names[:3]:
            c.client_cfg[name]["policy"] = AGREED
        c.start()
        c.wait_enrolled()
        yield c


def _policy_show(c: LocalConsortium, name: str) -> str:
    out = subprocess.run([sys.executable, "-m", "client_app", "policy", "show", "--config",
                          str(c.dir / f"{name}.json")], capture_output=True, text=True,
                         timeout=60, cwd=_REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _captured_rounds(capture: Path, n: int) -> CaptureFiles:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (capture / "manifest.json").is_file():
            files = CaptureFiles.open(capture)
            if len(files.manifest.rounds) >= n:
                return files
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {n} rounds captured")


def test_a_member_that_did_not_agree_refuses_a_captured_round(
        consortium: LocalConsortium) -> None:
    ids = dict(zip(consortium.names, consortium.enrolled(), strict=True))
    info = consortium.create_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                   params={**demo_params(samples=5), "threshold": 3})
    assert info["captured"] is True  # announced before anyone sends anything
    done = consortium.wait_round(info["round_id"], timeout_s=60)
    assert done["status"] == "finished", done
    (refusal,) = done["refusals"]
    assert refusal["client_id"] == ids["site-3"] and refusal["reason"] == "captured"
    assert "allow_captured_rounds" in refusal["detail"]
    with sqlite3.connect(consortium.client_cfg["site-3"]["db_path"]) as db:
        status, detail = db.execute("SELECT status, detail FROM rounds WHERE round_id=?",
                                    (info["round_id"],)).fetchone()
    assert status == "refused" and detail.startswith("captured")
    # Nothing of site-3's is in the capture: it sent no masked input.
    (rnd,) = _captured_rounds(Path(consortium.server_cfg["capture"]["dir"]), 1).manifest.rounds
    assert sorted(a.member for a in rnd.artefacts if a.kind == "masked_input") == \
        ["site-0", "site-1", "site-2"]
    assert "only in rounds the server does not capture" in _policy_show(consortium, "site-3")
    assert "updates in captured rounds" in _policy_show(consortium, "site-3")
    agreed = _policy_show(consortium, "site-0")
    assert "also in rounds the server captures" in agreed and "captured rounds" not in \
        agreed.split("never:")[-1]


def _wait_log(path: Path, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{path.name} never said {text!r}")


def test_a_finished_round_not_yet_captured_survives_a_server_crash(
        consortium: LocalConsortium) -> None:
    """The round finished (every upload acknowledged), its capture not written when the
    server is SIGKILLed: the restarted server captures it from its store. The worker is kept
    from writing it by a file where the round's folder goes (the window between the finish
    and the capture is otherwise a few milliseconds)."""
    capture = Path(consortium.server_cfg["capture"]["dir"])
    with sqlite3.connect(consortium.server_cfg["db_path"]) as db:
        (last,) = db.execute("SELECT seq FROM sqlite_sequence WHERE name='rounds'").fetchone()
    round_id = int(last) + 1
    blocker = capture / f"round-{round_id:06d}"
    blocker.write_text("in the way of the capture worker")
    done = consortium.run_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                params={**demo_params(samples=5), "threshold": 3},
                                participants=consortium.enrolled()[:3])
    assert done["round_id"] == round_id and done["captured"] is True
    _wait_log(consortium.dir / "server.log", f"capture of round {round_id} failed")
    assert round_id not in {r.round_id for r in CaptureFiles.open(capture).manifest.rounds}
    assert (capture / ".pending" / f"round-{round_id:06d}").is_file()
    consortium.kill("server")
    blocker.unlink()
    consortium.start_server()
    # The server says so once the round is in the manifest and its marker is gone.
    _wait_log(consortium.dir / "server.log", f"round {round_id} captured in")
    files = _captured_rounds(capture, 2)  # every file checked against its sha256
    rnd = next(r for r in files.manifest.rounds if r.round_id == round_id)
    assert rnd.router_version == done["router_version"]
    assert sorted(a.kind for a in rnd.artefacts) == \
        ["aggregate"] + ["masked_input"] * 3 + ["unmasking_shares"] * 3
    assert not any((capture / ".pending").iterdir())
    # The restarted server goes on capturing: the next round lands as usual.
    after = consortium.run_round(kind="router_secagg", vector_length=LENGTH, min_clients=3,
                                 params={**demo_params(samples=5), "threshold": 3},
                                 participants=consortium.enrolled()[:3])
    assert after["round_id"] in {r.round_id for r in _captured_rounds(capture, 3).manifest.rounds}


def test_a_reward_query_line_torn_by_a_crash_does_not_spoil_the_log(tmp_path: Path) -> None:
    """A crash in the middle of an append leaves half a line (its query was never answered):
    the next append cuts it, and every whole line still reads."""
    from sdk.capture import RewardQuery, write_capture

    def query(i: int) -> RewardQuery:
        return RewardQuery(image_sha256=f"{i:064x}", prompt="p", response=f"r{i}", score=0.5,
                           member="a")

    write_capture(tmp_path, reward_queries=[query(0), query(1)])
    log = tmp_path / "reward-queries.jsonl"
    with log.open("a") as f:
        f.write(query(2).model_dump_json()[:40])  # the crash
    write_capture(tmp_path, reward_queries=[query(3)])
    assert [q.response for q in CaptureFiles.open(tmp_path).reward_queries()] == \
        ["r0", "r1", "r3"]
