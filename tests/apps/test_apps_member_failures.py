"""Every failure of a member is named where it must be fixed, against a real server over HTTP on
127.0.0.1 and real member runners: the operator's ``rounds check`` names the members whose
announced round terms refuse a round before it opens; a member whose local update fails reports
why, and the operator's ``rounds show`` and the round's failure text name it; ``fedmor client``
refuses to start on a wrong setting, naming it, and ``fedmor client check`` prints each check;
a revoked member logs it at ERROR and stops; a member that loses the server says so at
WARNING, and when it is back."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from client_app import ClientRunner, ClientSettings
from client_app._demo import demo_update
from fedmor_local import free_port
from sdk.cli import main
from sdk.data import load_pairs
from sdk.membership import add_to_roster
from sdk.wire import RoundInfo, load_or_create_key, public_key_b64
from server_app import ServerSettings
from server_app._app import create_app
from tests._checkout import checkout_env
from tests._serve import served

NAMES = ("st-mary", "city-bank", "st-luke")
ADMIN = "adm"


class Team:
    """A served server whose roster holds ``NAMES``, and each member's settings."""

    def __init__(self, url: str, work: Path, tokens: dict[str, str]) -> None:
        self.url, self.work, self.tokens = url, work, tokens
        self.admin = httpx.Client(base_url=url, timeout=30,
                                  headers={"authorization": f"Bearer {ADMIN}"})

    def settings(self, name: str, **overrides: Any) -> ClientSettings:
        return ClientSettings(name=name, server_url=self.url,
                              enrollment_token=self.tokens[name],  # type: ignore[arg-type]
                              identity_key=self.work / name / "identity.pem",
                              db_path=self.work / name / "client.db", poll_interval_s=0.05,
                              long_poll_s=0.5, retry_max_s=0.05, **overrides)

    def wait_round(self, round_id: int, timeout_s: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.admin.get(f"/v1/rounds/{round_id}").json()
            if info["status"] != "open":
                return dict(info)
            time.sleep(0.05)
        raise TimeoutError(f"round {round_id} still open")


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    roster = tmp_path / "roster.json"
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(
        load_or_create_key(tmp_path / n / "identity.pem"))) for n in NAMES}
    port = free_port()  # the settings name it: requests are signed for the server they reach
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token=ADMIN,  # type: ignore[arg-type]
                         tick_interval_s=0.1, stage_deadline_s=20.0, port=port)
    with served(create_app(cfg), port) as url:
        t = Team(url, tmp_path, tokens)
        yield t
        t.admin.close()


@contextlib.contextmanager
def running(runners: list[ClientRunner]) -> Iterator[list[threading.Thread]]:
    threads = [threading.Thread(target=r.run_forever, daemon=True) for r in runners]
    for t in threads:
        t.start()
    try:
        yield threads
    finally:
        for r in runners:
            r.stop.set()
        for t in threads:
            t.join(timeout=30)
        for r in runners:
            r.close()


def _moved_data(missing: Path) -> Any:
    def update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
        load_pairs(missing)  # the site's pairs folder was moved away
        return demo_update(name, info, base)
    return update


def test_an_abandoned_round_names_the_member_and_its_cause(
        team: Team, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    missing = team.work / "private-folder-of-st-mary" / "pairs"
    runners = [ClientRunner(team.settings(n), update_fn=_moved_data(missing)
                            if n == "st-mary" else demo_update) for n in NAMES]
    for r in runners:
        r.enroll()
    caplog.set_level(logging.INFO, logger="fedmor.client")
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN)
    with running(runners):
        # Before opening: the members' announced round terms say whom a round would lose.
        _until(lambda: all(m["round_terms"] for m in team.admin.get("/v1/members").json()))
        capsys.readouterr()
        assert main(["rounds", "check", "--members", "st-mary,city-bank", "--server",
                     team.url, "--insecure-http", "--json"]) == 1
        assert json.loads(capsys.readouterr().out) == [
            {"member": n, "refusal": "participants: 2 < its min_participants 3"}
            for n in ("city-bank", "st-mary")]
        assert main(["rounds", "check", "--server", team.url, "--insecure-http"]) == 0
        assert "no member's announced round terms refuse" in capsys.readouterr().out
        opened = team.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 64, "min_clients": 3}).json()
        info = team.wait_round(opened["round_id"])
    assert info["status"] == "failed"
    mary = runners[0].client_id
    # The JSON the operator's tools read: who left, at which stage, why.
    (failure,) = info["failures"]
    assert failure["member"] == "st-mary" and failure["client_id"] == mary
    assert failure["reason"] == "local update failed: data directory not found"
    assert failure["stage"] in info["stages"]
    # The failure text names the member and the cause beside the protocol's cause.
    assert f"st-mary at {failure['stage']}: local update failed: data directory not found" \
        in info["error"]
    assert "private-folder-of-st-mary" not in json.dumps(info)  # the member's path stays home
    # The member's log says it at WARNING (with the whole local cause), not INFO.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING
              and "abandoned" in r.getMessage() and "data directory not found" in r.getMessage()]
    assert warned, [r.getMessage() for r in caplog.records]
    # ``fedmor rounds show`` names it; its JSON carries the list.
    capsys.readouterr()
    assert main(["rounds", "show", str(info["round_id"]), "--server", team.url, "--insecure-http"]) == 0
    out = capsys.readouterr().out
    assert "st-mary" in out and "local update failed: data directory not found" in out
    assert main(["rounds", "show", str(info["round_id"]), "--server", team.url, "--insecure-http",
                 "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [{k: f[k] for k in ("member", "stage", "reason")} for f in shown["failures"]] == [
        {"member": "st-mary", "stage": failure["stage"], "reason": failure["reason"]}]


def test_a_member_that_vanished_is_named_as_giving_no_answer(team: Team) -> None:
    runners = [ClientRunner(team.settings(n), update_fn=demo_update) for n in NAMES]
    for r in runners:
        r.enroll()
    runners[2].close()  # st-luke enrolled, then went away without a word
    with running(runners[:2]):
        opened = team.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 64, "min_clients": 3,
            "stage_deadline_s": 3.0}).json()
        info = team.wait_round(opened["round_id"])
    assert info["status"] == "failed"
    # (a member slowed past the short deadline by a loaded machine would be named too)
    assert ("st-luke", "no answer by the stage deadline") in [
        (f["member"], f["reason"]) for f in info["failures"]]
    assert "who left: st-luke at" in info["error"]


def _client(team: Team, name: str, *args: str, **cfg: Any) -> tuple[list[str], Path]:
    """The command line of ``fedmor client`` for ``name`` (``args``: a sub-command) and its
    settings file (TOML, as a member writes it)."""
    settings = {"name": name, "server_url": team.url, "enrollment_token": team.tokens[name],
                "identity_key": str(team.work / name / "identity.pem"),
                "db_path": str(team.work / name / "client.db"), "port": free_port(),
                "scorer": "client_app._scorer:HashScorer", "poll_interval_s": 0.05,
                "long_poll_s": 0.5, "allow_plain_http": True, **cfg}
    path = team.work / f"{name}.toml"
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items()
             if v is not None and not isinstance(v, dict)]
    for section, values in ((k, v) for k, v in settings.items() if isinstance(v, dict)):
        lines += [f"[{section}]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    path.write_text("\n".join(lines) + "\n")
    return [sys.executable, "-m", "client_app", *args, "--config", str(path)], path


def test_a_member_with_a_missing_data_folder_refuses_to_start_naming_the_setting(
        team: Team) -> None:
    moved = team.work / "moved-away"
    argv, path = _client(team, "st-mary", router_training={"pairs_dir": str(moved)})
    started = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                             env=checkout_env())
    assert started.returncode != 0
    assert f"[router_training] pairs_dir ({path})" in started.stderr, started.stderr
    assert f"{moved} does not exist" in started.stderr
    assert "server_url" not in started.stderr  # the server is there: only the wrong setting
    # ``fedmor client check``: one line per check; a fresh member without a token is told
    # so instead of listening silently.
    check_argv, _ = _client(team, "st-luke", "check", enrollment_token=None,
                            router_training={"pairs_dir": str(moved)})
    checked = subprocess.run(check_argv, capture_output=True, text=True, timeout=120,
                             env=checkout_env())
    assert checked.returncode == 1
    lines = checked.stdout.splitlines()
    for failed in ("[router_training] pairs_dir", "enrollment_token"):
        assert any(line.startswith(f"FAIL  {failed}") for line in lines), lines
    assert any(line.startswith("ok    server_url") for line in lines), lines
    assert any(line.startswith("ok    identity_key") for line in lines), lines


def test_a_revoked_member_logs_it_at_error_and_stops(team: Team) -> None:
    argv, _ = _client(team, "city-bank", demo=True)
    log = (team.work / "city-bank.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=checkout_env())
    try:
        deadline = time.monotonic() + 120
        while not any(m["name"] == "city-bank" and m["client_id"]
                      for m in team.admin.get("/v1/members").json()):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (team.work / "city-bank.log").read_text()
            time.sleep(0.05)
        assert team.admin.post("/v1/members/city-bank/revoke",
                               json={"reason": "left"}).status_code == 200
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    text = (team.work / "city-bank.log").read_text()
    errors = [line for line in text.splitlines() if "ERROR" in line and "revoked" in line]
    assert code != 0 and len(errors) == 1, text


def test_a_member_that_cannot_reach_the_server_warns_and_says_when_it_is_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    roster = tmp_path / "roster.json"
    token = add_to_roster(roster, name="st-mary", public_key=public_key_b64(
        load_or_create_key(tmp_path / "st-mary" / "identity.pem")))
    port = free_port()
    team = Team(f"http://127.0.0.1:{port}", tmp_path, {"st-mary": token})
    runner = ClientRunner(team.settings("st-mary"), update_fn=demo_update)
    caplog.set_level(logging.INFO, logger="fedmor.client")

    def logged(level: int, words: str) -> bool:
        return any(r.levelno == level and words in r.getMessage() for r in caplog.records)

    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token=ADMIN)  # type: ignore[arg-type]
    with running([runner]):
        _until(lambda: logged(logging.WARNING, f"cannot reach the server at {team.url}"))
        server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            _until(lambda: logged(logging.INFO, f"reached the server at {team.url} again"))
            _until(lambda: runner.store.get("client_id") is not None)  # and it enrolled
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    team.admin.close()


def test_a_member_refused_at_start_tells_the_operator_which_setting(
        team: Team, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    runners = [ClientRunner(team.settings(n), update_fn=demo_update) for n in NAMES]
    for r in runners:
        r.enroll()
    runners[0].close()  # st-mary enrolled; its data folder is then moved away
    moved = team.work / "private-folder-of-st-mary"
    argv, _ = _client(team, "st-mary", router_training={"pairs_dir": str(moved)})
    started = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                             env=checkout_env())
    assert started.returncode != 0
    told = "not started: [router_training] pairs_dir: not found"
    assert f"the operator sees: {told}" in started.stderr, started.stderr
    # The operator's members views show the problem, without the member's path.
    (mary,) = [m for m in team.admin.get("/v1/reports/members").json()
               if m["name"] == "st-mary"]
    assert mary["problem"] == told and "private-folder" not in json.dumps(mary)
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN)
    capsys.readouterr()
    assert main(["members", "list", "--server", team.url, "--insecure-http"]) == 0
    assert told in capsys.readouterr().out
    # A round it gives no answer to names the known problem beside the silence.
    with running(runners[1:]):
        opened = team.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 64, "min_clients": 3,
            "stage_deadline_s": 3.0}).json()
        info = team.wait_round(opened["round_id"])
    assert info["status"] == "failed"
    assert ("st-mary", f"no answer by the stage deadline ({told})") in [
        (f["member"], f["reason"]) for f in info["failures"]]
    # Its next clean start clears the problem.
    with running([ClientRunner(team.settings("st-mary"), update_fn=demo_update)]):
        _until(lambda: _member(team, "st-mary")["started_at"] is not None)
    assert _member(team, "st-mary")["problem"] is None


def test_a_member_restarted_during_a_round_is_shown_restarted(
        team: Team, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    runners = [ClientRunner(team.settings(n), update_fn=demo_update) for n in NAMES]
    with running(runners[:2]):
        with running(runners[2:]):
            _until(lambda: all(m["started_at"] for m in team.admin.get("/v1/members").json()))
        assert _member(team, "st-luke")["restarts"] == 0  # a first start is no restart
        # st-luke stopped (as if killed); a round opens and waits for it; it starts again.
        opened = team.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 64, "min_clients": 3}).json()
        with running([ClientRunner(team.settings("st-luke"), update_fn=demo_update)]):
            info = team.wait_round(opened["round_id"])
    assert info["status"] == "finished" and not info["failures"]  # it resumed: no failure
    luke = _member(team, "st-luke")
    assert luke["restarts"] == 1 and luke["restarted_in_round"] == info["round_id"]
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN)
    capsys.readouterr()
    assert main(["members", "show", "st-luke", "--server", team.url, "--insecure-http"]) == 0
    assert f"(during round {info['round_id']})" in capsys.readouterr().out


def test_a_round_resumed_after_a_server_restart_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    roster = tmp_path / "roster.json"
    tokens = {n: add_to_roster(roster, name=n, public_key=public_key_b64(
        load_or_create_key(tmp_path / n / "identity.pem"))) for n in NAMES}
    cfg = ServerSettings(db_path=tmp_path / "s.db", identity_key=tmp_path / "id.pem",
                         roster_file=roster, admin_token=ADMIN)  # type: ignore[arg-type]
    with served(create_app(cfg)) as url:
        team = Team(url, tmp_path, tokens)
        for n in NAMES:
            ClientRunner(team.settings(n), update_fn=demo_update).enroll()
        opened = team.admin.post("/v1/rounds", json={
            "kind": "router_secagg", "vector_length": 64, "min_clients": 3}).json()
        assert httpx.get(f"{url}/v1/health").json()["recovered_rounds"] == []
        team.admin.close()
    with served(create_app(cfg)) as url:  # the server again, on the same store
        health = httpx.get(f"{url}/v1/health").json()
        assert health["recovered_rounds"] == [opened["round_id"]] and health["started_at"]
        admin = httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN}"})
        info = admin.get(f"/v1/rounds/{opened['round_id']}").json()
        admin.close()
        assert info["status"] == "open"
        assert info["resumed"].startswith(f"resumed after a server restart at stage "
                                          f"{info['stages'][0]}")
        monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN)
        capsys.readouterr()
        assert main(["rounds", "show", str(opened["round_id"]), "--server", url, "--insecure-http"]) == 0
        assert "resumed after a server restart" in capsys.readouterr().out
        assert main(["server", "status", "--server", url, "--insecure-http"]) == 0
        assert f"resumed open round(s) {opened['round_id']}" in capsys.readouterr().out


def _member(team: Team, name: str) -> dict[str, Any]:
    (found,) = [m for m in team.admin.get("/v1/members").json() if m["name"] == name]
    return dict(found)


def _until(condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
