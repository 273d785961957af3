"""Mutual TLS: a server with ``require_client_cert`` serves only callers whose certificate the
consortium's CA signed; members with a certificate complete a round, a caller without one (or
with one from another CA) fails the TLS handshake before any request is read; the admin commands
present the operator's certificate with --client-cert/--client-key."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from fedmor_local import OPEN_POLICY
from fedmor_local._local import ADMIN_TOKEN
from fedmor_local._pki import client_cert_paths, make_pki
from server_app import ServerSettings
from tests.apps.conftest import running

_REPO = Path(__file__).resolve().parents[2]


def test_with_mutual_tls_members_with_certificates_complete_a_round(tmp_path: Path) -> None:
    with running(tmp_path / "c", 3, mtls=True, demo=True, policy=OPEN_POLICY,
                 server={"stage_deadline_s": 30.0}) as c:
        assert c.server_cfg["require_client_cert"] is True
        done = c.run_round(kind="router_secagg", vector_length=64, min_clients=3,
                           timeout_s=90)
        assert done["status"] == "finished" and done["dropouts"] == []
        assert len(c.enrolled()) == 3
        # The operator (this harness) holds a certificate too: without one the handshake fails.
        with httpx.Client(verify=c.verify, timeout=5) as bare, \
                pytest.raises((httpx.ConnectError, httpx.ReadError,
                               httpx.RemoteProtocolError)):
            bare.get(f"{c.server_url}/v1/health").raise_for_status()
        # A certificate from another CA is refused the same way.
        make_pki(tmp_path / "other", ["intruder"])
        foreign = ssl.create_default_context(cafile=str(c.pki[0]))
        foreign.load_cert_chain(*client_cert_paths(tmp_path / "other", "intruder"))
        with httpx.Client(verify=foreign, timeout=5) as intruder, \
                pytest.raises((httpx.ConnectError, httpx.ReadError,
                               httpx.RemoteProtocolError)):
            intruder.get(f"{c.server_url}/v1/health").raise_for_status()
        with httpx.Client(verify=c.operator_tls, timeout=5) as operator:
            assert operator.get(f"{c.server_url}/v1/health").status_code == 200
        # Every admin command takes the operator's certificate the same way.
        assert c.cert is not None and c.pki is not None
        tls = ["--server", c.server_url, "--ca", str(c.pki[0])]
        cert = ["--client-cert", c.cert[0], "--client-key", c.cert[1]]
        listed = _admin("roster", "list", *tls, *cert)
        assert listed.returncode == 0, listed.stderr
        assert any(line.startswith("site-0 ") for line in listed.stdout.splitlines())
        rolled = _admin("router", "rollback", "1", *tls, *cert)
        assert rolled.returncode == 0, rolled.stderr
        assert "router version 1 restored as version 2" in rolled.stdout
        refused = _admin("router", "rollback", "1", *tls)  # no certificate
        assert refused.returncode != 0 and "restored" not in refused.stdout
        half = _admin("router", "rollback", "1", *tls, cert[0], cert[1])
        assert half.returncode != 0 and "--client-cert and --client-key" in half.stderr


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    """``fedmor ARGS`` with the local consortium's admin token."""
    return subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=_REPO,
                          env={**os.environ, "FEDMOR_ADMIN_TOKEN": ADMIN_TOKEN})


def test_require_client_cert_without_https_or_a_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="require_client_cert needs"):
        ServerSettings(require_client_cert=True)
    ca, cert, key = make_pki(tmp_path)
    ok = ServerSettings(require_client_cert=True, tls_cert=cert, tls_key=key, tls_ca=ca)
    assert ok.client_ca == ca
    # A member naming only half of its client certificate is told so at start.
    config = tmp_path / "client.json"
    config.write_text(f'{{"db_path": "{tmp_path / "c.db"}", "identity_key": '
                      f'"{tmp_path / "id.pem"}", "demo": true, "tls_client_cert": "{cert}"}}')
    started = subprocess.run([sys.executable, "-m", "client_app", "--config", str(config)],
                             capture_output=True, text=True, timeout=60, cwd=_REPO)
    assert started.returncode != 0
    assert "tls_client_cert and tls_client_key" in started.stderr
