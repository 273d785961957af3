"""The operator's commands against a real ``fedmor server`` process on 127.0.0.1: ``fedmor
enroll`` writes a 0600 profile that later commands use without the six connection flags, the
roster changes on the running server (an existing name refused unless ``--replace``),
rounds open, show and cancel, listings print JSON with ``--json``."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sdk.cli import main
from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64
from sdk.wire._auth import write_private_key
from tests._checkout import checkout_env


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """A running server whose roster holds one operator; yields (url, folder, its token)."""
    work = tmp_path_factory.mktemp("ops")
    key = generate_key()
    write_private_key(key, work / "ops.pem")
    token = add_to_roster(work / "roster.json", name="ops", public_key=public_key_b64(key),
                          role="operator")
    port = _port()
    (work / "server.toml").write_text(
        f'host = "127.0.0.1"\nport = {port}\ndb_path = "{work}/s.db"\n'
        f'identity_key = "{work}/id.pem"\nroster_file = "{work}/roster.json"\n'
        f"tick_interval_s = 0.2\nallow_plain_http = true\n")
    proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "server", "--config",
                             str(work / "server.toml")], env=checkout_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:  # until it answers, or it died (its stderr says why)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                continue
        yield url, work, token
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def config_dir(tmp_path_factory: pytest.TempPathFactory,
               monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path_factory.getbasetemp() / "config"
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(folder))
    monkeypatch.delenv("FEDMOR_ADMIN_TOKEN", raising=False)
    return folder


def test_enroll_writes_a_private_profile_the_commands_use(
        server: tuple[str, Path, str], config_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, work, token = server
    code, out, err = _run(capsys, "enroll", "--server", url, "--identity",
                          str(work / "ops.pem"), "--token", token, "--name", "ops",
                          "--role", "operator")
    assert code == 0, err
    path = config_dir / "profiles.toml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    code, out, _ = _run(capsys, "profile", "list", "--json")
    [profile] = json.loads(out)
    assert profile["role"] == "operator" and profile["default"] and profile["server"] == url
    # no connection flag at all: the default profile signs
    code, out, err = _run(capsys, "members", "list", "--json")
    assert code == 0, err
    assert {m["name"]: m["state"] for m in json.loads(out)} == {"ops": "enrolled"}
    # fedmor align reads a profile too, and refuses one that is not an aligner's
    code, _, err = _run(capsys, "align", "--policy", "p", "--queries", "q", "--out", "o")
    assert code == 1 and "fedmor align signs as the aligner" in err
    # a wrong role is refused before any profile is written
    code, _, err = _run(capsys, "enroll", "--server", url, "--identity", str(work / "ops.pem"),
                        "--token", token, "--name", "ops", "--role", "member",
                        "--profile", "other")
    assert code == 1 and "operator" in err
    assert "other" not in path.read_text()


def test_live_roster_and_rounds(server: tuple[str, Path, str], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    url, _, _ = server
    member = generate_key()
    write_private_key(member, tmp_path / "luke.pem")
    code, out, err = _run(capsys, "roster", "add", "--name", "st-luke", "--public-key",
                          public_key_b64(member))
    assert code == 0, err
    token = out.split()[-1]
    code, _, err = _run(capsys, "roster", "add", "--name", "st-luke", "--public-key",
                        public_key_b64(generate_key()))
    assert code == 1 and "--replace" in err
    code, _, err = _run(capsys, "enroll", "--server", url, "--identity",
                        str(tmp_path / "luke.pem"), "--token", token, "--name", "st-luke",
                        "--profile", "luke")
    assert code == 0, err
    code, out, _ = _run(capsys, "members", "list", "--json", "--profile", "ops")
    assert {m["name"]: m["state"] for m in json.loads(out)}["st-luke"] == "enrolled"
    # a member's profile signs as a member: the operator endpoints refuse it
    code, _, err = _run(capsys, "members", "list", "--profile", "luke")
    assert code == 1 and "403" in err
    code, out, err = _run(capsys, "rounds", "open", "rm_fedavg", "--members", "st-luke",
                          "--length", "4", "--json", "--profile", "ops")
    assert code == 0, err
    opened = json.loads(out)
    assert opened["status"] == "open" and len(opened["participants"]) == 1
    code, out, err = _run(capsys, "rounds", "cancel", str(opened["round_id"]), "--reason",
                          "test", "--profile", "ops")
    assert code == 0, err
    code, out, _ = _run(capsys, "rounds", "list", "--json", "--profile", "ops")
    assert [(r["round_id"], r["status"]) for r in json.loads(out)] == [
        (opened["round_id"], "failed")]
    code, out, _ = _run(capsys, "rounds", "show", str(opened["round_id"]), "--profile", "ops")
    assert "cancelled by" in out and "st-luke" in out  # the table names members, not ids
    code, out, _ = _run(capsys, "router", "history", "--json", "--profile", "ops")
    assert (code, json.loads(out)) == (0, [])
    code, _, err = _run(capsys, "router", "show", "--profile", "ops")
    assert code == 1 and "404" in err and "no router version" in err
    code, out, err = _run(capsys, "alignment", "status", "--json", "--profile", "ops")
    assert code == 0 and json.loads(out)["items"] == 0, err
    code, _, err = _run(capsys, "roster", "remove", "--name", "st-luke", "--profile", "ops")
    assert code == 0, err
    code, out, _ = _run(capsys, "members", "show", "st-luke", "--json", "--profile", "ops")
    assert json.loads(out)["state"] == "revoked"
