"""Identity keys at rest encrypted (PKCS#8 with a passphrase from FEDMOR_KEY_PASSPHRASE or the
``identity_key_passphrase_file`` setting): written encrypted when a passphrase is configured,
and an encrypted key without its passphrase stops either app at start with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedmor_local import free_port
from fedmor_local._local import wait_healthy
from sdk.wire import KEY_PASSPHRASE_ENV, load_or_create_key, load_private_key, public_key_b64
from tests._checkout import checkout_env

_REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return checkout_env(drop=(KEY_PASSPHRASE_ENV,), **extra)


def test_a_key_written_with_a_passphrase_needs_it_back(tmp_path: Path) -> None:
    path = tmp_path / "id.pem"
    key = load_or_create_key(path, b"correct horse")
    assert b"ENCRYPTED PRIVATE KEY" in path.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o600
    assert public_key_b64(load_private_key(path, b"correct horse")) == public_key_b64(key)
    with pytest.raises(ValueError, match=f"is encrypted: set {KEY_PASSPHRASE_ENV}"):
        load_private_key(path)
    with pytest.raises(ValueError, match="wrong passphrase"):
        load_private_key(path, b"battery staple")


@pytest.mark.parametrize("app", ["server_app", "client_app"])
def test_an_encrypted_key_without_its_passphrase_stops_the_app(tmp_path: Path,
                                                               app: str) -> None:
    key = tmp_path / "id.pem"
    load_or_create_key(key, b"s3cret")
    config = tmp_path / "app.json"
    settings = {"db_path": str(tmp_path / "app.db"), "identity_key": str(key), "port": 0}
    if app == "client_app":
        settings |= {"demo": True, "run_rounds": False}
    else:
        settings |= {"allow_plain_http": True}  # the key is what stops it here
    config.write_text(json.dumps(settings))
    proc = subprocess.run([sys.executable, "-m", app, "--config", str(config)],
                          capture_output=True, text=True, timeout=60, env=_env(), cwd=_REPO)
    assert proc.returncode == 2, proc.stderr
    assert (f"identity key {key} is encrypted: set {KEY_PASSPHRASE_ENV} or the "
            "identity_key_passphrase_file setting") in proc.stderr
    assert "Traceback" not in proc.stderr
    wrong = subprocess.run([sys.executable, "-m", app, "--config", str(config)],
                           capture_output=True, text=True, timeout=60, cwd=_REPO,
                           env=_env(**{KEY_PASSPHRASE_ENV: "guess"}))
    assert wrong.returncode == 2 and "wrong passphrase" in wrong.stderr


def test_the_server_starts_with_its_passphrase_file_and_writes_its_key_encrypted(
        tmp_path: Path) -> None:
    secret = tmp_path / "passphrase"
    secret.write_text("from a file\n")
    secret.chmod(0o600)
    port = free_port()
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"db_path": str(tmp_path / "s.db"), "port": port,
                                  "identity_key": str(tmp_path / "id.pem"),
                                  "identity_key_passphrase_file": str(secret),
                                  "allow_plain_http": True}))
    proc = subprocess.Popen([sys.executable, "-m", "server_app", "--config", str(config)],
                            env=_env(), cwd=_REPO, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", verify=True, proc=proc, timeout_s=60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "id.pem").read_bytes()
    load_private_key(tmp_path / "id.pem", b"from a file")
    secret.chmod(0o644)  # a passphrase others may read protects nothing
    with pytest.raises(PermissionError, match="other users may read it"):
        from sdk.wire import key_passphrase

        key_passphrase(secret)


def test_keys_new_encrypt(tmp_path: Path) -> None:
    out = tmp_path / "op.pem"
    cli = [sys.executable, "-m", "sdk.cli", "keys", "new", "--encrypt", "--out", str(out)]
    refused = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=_env(),
                             cwd=_REPO)
    assert refused.returncode != 0 and "--encrypt needs a passphrase" in refused.stderr
    assert not out.exists()
    made = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=_REPO,
                          env=_env(**{KEY_PASSPHRASE_ENV: "pw"}))
    assert made.returncode == 0, made.stderr
    assert public_key_b64(load_private_key(out, b"pw")) == made.stdout.strip()
    assert b"ENCRYPTED PRIVATE KEY" in out.read_bytes()
