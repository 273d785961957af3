"""Schemathesis against both apps' OpenAPI schemas (in-process ASGI): no 5xx, ever."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from client_app import ClientSettings, HashScorer, create_client_app
from server_app import (
    ServerSettings,
    add_to_roster,
    create_app,
    generate_key,
    public_key_b64,
    sign_headers,
)

# The apps are built at import (schemathesis reads their schemas at collection), before any
# fixture could give them a folder: this one is removed when the test process exits.
_ROOT = Path(tempfile.mkdtemp(prefix="fedmor-fuzz-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def _server() -> FastAPI:
    return create_app(ServerSettings(db_path=_ROOT / "s.db", identity_key=_ROOT / "s.pem",
                                     admin_token="adm"))  # type: ignore[arg-type]


_ALIGNER_KEY = generate_key()


def _aligner_server() -> tuple[TestClient, str]:
    """A server with one enrolled aligner (and no member): the fuzzer's requests are signed
    as that aligner, so they reach the reward endpoints' own validation."""
    roster = _ROOT / "aligner-roster.json"
    token = add_to_roster(roster, name="job", public_key=public_key_b64(_ALIGNER_KEY),
                          role="aligner")
    app = create_app(ServerSettings(db_path=_ROOT / "a.db", identity_key=_ROOT / "a.pem",
                                    roster_file=roster))
    tc = TestClient(app)
    enrolled = tc.post("/v1/enroll", json={"name": "job", "token": token,
                                            "public_key": public_key_b64(_ALIGNER_KEY)})
    return tc, enrolled.json()["client_id"]


_ALIGNER_TC, _ALIGNER_ID = _aligner_server()
aligner_schema = schemathesis.openapi.from_asgi("/openapi.json", _ALIGNER_TC.app).include(
    path_regex="^/v1/rewards")


def _client() -> FastAPI:
    return create_client_app(ClientSettings(db_path=_ROOT / "c.db", identity_key=_ROOT / "c.pem"),
                             HashScorer())


server_schema = schemathesis.openapi.from_asgi("/openapi.json", _server())
client_schema = schemathesis.openapi.from_asgi("/openapi.json", _client())
_SETTINGS = hypothesis.settings(max_examples=8, deadline=None, derandomize=True,
                                suppress_health_check=list(hypothesis.HealthCheck))


@server_schema.parametrize()
@_SETTINGS
def test_server_never_5xx(case: schemathesis.Case) -> None:
    # As admin, so the fuzzer gets past authentication into the handlers' validation.
    response = case.call(headers={"authorization": "Bearer adm"})
    assert response.status_code < 500, (case.method, case.path, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"]


@aligner_schema.parametrize()
@_SETTINGS
def test_aligner_endpoints_never_5xx(case: schemathesis.Case) -> None:
    # Signed over the exact bytes sent: the generated body reaches the handlers.
    body = b""
    if case.method != "GET" and type(case.body).__name__ != "NotSet":
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    headers = sign_headers(_ALIGNER_KEY, sender=_ALIGNER_ID, method=case.method,
                           path=case.formatted_path, body=body)
    response = _ALIGNER_TC.request(case.method, case.formatted_path, content=body or None,
                                   headers=headers | {"content-type": "application/json"})
    assert response.status_code < 500, (case.method, case.path, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"]


@client_schema.parametrize()
@_SETTINGS
def test_client_never_5xx(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.text)


def test_every_endpoint_documented() -> None:
    paths = _server().openapi()["paths"]
    for path in ("/v1/health", "/v1/enroll", "/v1/rounds", "/v1/rounds/{round_id}",
                 "/v1/rounds/{round_id}/stages/{stage}", "/v1/router/latest",
                 "/v1/router/{version}", "/v1/reward/pending",
                 "/v1/reward/answers/{query_id}", "/v1/work", "/v1/rounds/{round_id}/refusal",
                 "/v1/ready", "/metrics", "/v1/rewards",
                 "/v1/rewards/feedback", "/v1/rewards/stats", "/v1/identity/rotations",
                 "/v1/identity/clip-bound"):
        assert path in paths, path
        for op in paths[path].values():
            assert "200" in op["responses"] or "204" in op["responses"]
    assert {"/v1/reward", "/v1/ready", "/metrics"} <= set(_client().openapi()["paths"])


pytestmark = pytest.mark.filterwarnings("ignore")
