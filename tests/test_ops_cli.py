"""The operator's commands against a real ``fedmor server`` process on 127.0.0.1: ``fedmor
enroll`` writes a 0600 profile that later commands use without the six connection flags, the
roster changes on the running server (an existing name refused unless ``--replace``),
rounds open, show and cancel, listings print JSON with ``--json``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedmor_local import free_port
from fedmor_local._local import wait_healthy
from sdk.cli import main
from sdk.membership import add_to_roster
from sdk.wire import generate_key, public_key_b64
from sdk.wire._auth import write_private_key
from tests._checkout import checkout_env

READY_S = 120  # the longest a fresh server may take to answer /v1/health on a loaded machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """A running server whose roster holds two operators, ``ops`` (whose enrollment a test
    runs) and ``chief`` (``chief.token``, enrolled once by the ``chief`` fixture); yields (url, folder,
    ops's token)."""
    work = tmp_path_factory.mktemp("ops")
    for name in ("ops", "chief"):
        key = generate_key()
        write_private_key(key, work / f"{name}.pem")
        (work / f"{name}.token").write_text(add_to_roster(
            work / "roster.json", name=name, public_key=public_key_b64(key), role="operator"))
    token = (work / "ops.token").read_text()
    port = free_port()
    (work / "server.toml").write_text(
        f'host = "127.0.0.1"\nport = {port}\ndb_path = "{work}/s.db"\n'
        f'identity_key = "{work}/id.pem"\nroster_file = "{work}/roster.json"\n'
        f"tick_interval_s = 0.2\nallow_plain_http = true\n")
    log = (work / "server.log").open("wb")  # a file: a pipe nobody reads would fill up
    proc = subprocess.Popen([sys.executable, "-m", "sdk.cli", "server", "--config",
                             str(work / "server.toml")], env=checkout_env(),
                            stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        try:  # until it answers, it died or the deadline passed (its stderr says why)
            wait_healthy(url, verify=False, proc=proc, timeout_s=READY_S)
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"{exc}: {(work / 'server.log').read_text()[-2000:]}")
        yield url, work, token
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own profile folder: no test reads a profile another test wrote."""
    folder = tmp_path / "config"
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(folder))
    monkeypatch.delenv("FEDMOR_ADMIN_TOKEN", raising=False)
    return folder


@pytest.fixture(scope="module")
def chief(server: tuple[str, Path, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The profiles file after the operator ``chief`` enrolled once, as profile ``ops``."""
    url, work, _ = server
    folder = tmp_path_factory.mktemp("chief-config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDMOR_CONFIG_DIR", str(folder))
        patch.delenv("FEDMOR_ADMIN_TOKEN", raising=False)
        assert main(["enroll", "--server", url, "--insecure-http", "--identity",
                     str(work / "chief.pem"),
                     "--token", (work / "chief.token").read_text(), "--name", "chief",
                     "--role", "operator", "--profile", "ops"]) == 0
    return (folder / "profiles.toml").read_text()


@pytest.fixture
def chief_profile(chief: str, config_dir: Path) -> None:
    """This test's profile folder holds the enrolled operator's profile ``ops`` (default)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "profiles.toml"
    path.write_text(chief)
    path.chmod(0o600)


def test_enroll_writes_a_private_profile_the_commands_use(
        server: tuple[str, Path, str], config_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, work, token = server
    code, out, err = _run(capsys, "enroll", "--server", url, "--insecure-http", "--identity",
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
    assert {m["name"]: m["state"] for m in json.loads(out)}["ops"] == "enrolled"
    # fedmor align reads a profile too, and refuses one that is not an aligner's
    code, _, err = _run(capsys, "align", "--policy", "p", "--queries", "q", "--out", "o")
    assert code == 1 and "fedmor align signs as the aligner" in err
    # a wrong role is refused before any profile is written
    code, _, err = _run(capsys, "enroll", "--server", url, "--insecure-http", "--identity", str(work / "ops.pem"),
                        "--token", token, "--name", "ops", "--role", "member",
                        "--profile", "other")
    assert code == 1 and "operator" in err
    assert "other" not in path.read_text()


@pytest.mark.usefixtures("chief_profile")
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
    code, _, err = _run(capsys, "enroll", "--server", url, "--insecure-http", "--identity",
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


def test_plain_http_and_files_others_may_open_are_refused(
        server: tuple[str, Path, str], config_dir: Path, chief_profile: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, work, token = server
    path = config_dir / "profiles.toml"
    before = path.read_text()
    code, _, err = _run(capsys, "enroll", "--server", url, "--identity", str(work / "ops.pem"),
                        "--token", token, "--name", "ops", "--profile", "plain")
    assert code == 1 and "plain http" in err and "--insecure-http" in err, err
    assert path.read_text() == before  # no http profile written
    code, _, err = _run(capsys, "members", "list", "--server", url, "--key-file",
                        str(work / "ops.pem"), "--sender", "c-any")
    assert code == 1 and "--insecure-http" in err, err
    # A profiles file, then a key file, that other users may change or read: refused, as ssh.
    for private, mode in ((path, 0o666), (work / "chief.pem", 0o644)):
        os.chmod(private, mode)
        try:
            code, _, err = _run(capsys, "members", "list", "--json", "--profile", "ops")
        finally:
            os.chmod(private, 0o600)
        assert code == 1, err
        assert f"permissions {mode:04o} for '{private}' are too open" in err, err
        assert f"chmod 600 {private}" in err
    code, _, err = _run(capsys, "members", "list", "--json", "--profile", "ops")
    assert code == 0, err


def test_the_profiles_file_is_replaced_through_a_fresh_private_file(
        config_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A name planted beside profiles.toml (its old fixed temporary name, a link to another of
    the user's files) is never written through; a folder others may write is refused, as
    ssh refuses one."""
    from sdk.ops._profiles import Profile, ProfileBook

    book = ProfileBook()
    book.add("ops", Profile(server="https://fedmor.example.org", identity=tmp_path / "id.pem",
                            client_id="c-1", name="ops", role="operator"))
    path = book.save()
    victim = tmp_path / "authorized_keys"
    victim.write_text("the user's own file\n")
    (config_dir / "profiles.toml.tmp").symlink_to(victim)
    code, _, err = _run(capsys, "profile", "use", "ops")
    assert code == 0, err
    assert victim.read_text() == "the user's own file\n"
    assert not path.is_symlink() and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "ops" in path.read_text()
    config_dir.chmod(0o777)
    try:
        code, _, err = _run(capsys, "profile", "list")
    finally:
        config_dir.chmod(0o700)
    assert code == 1 and f"chmod 700 {config_dir}" in err, err
