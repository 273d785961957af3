"""Schemathesis against both apps' OpenAPI schemas (in-process ASGI): no 5xx, ever, and every
4xx says why. Each generated request is signed by a caller whose role the endpoint accepts (a
member, the aligner, an auditor, an operator; the server's own key towards the member app), so
it gets past authentication into the handler's own validation, which is what is fuzzed.

The budget (``FUZZ_EXAMPLES`` per operation, on top of schemathesis' boundary cases) finds a
removed check: with the member app's reward-body validation error no longer turned into a 422,
it finds the 500 at once (unsigned, the requests stopped at the 401 and never reached it)."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import hypothesis
import pytest
import schemathesis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI
from fastapi.testclient import TestClient

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from sdk.membership import add_to_roster
from sdk.wire import SERVER_SENDER, generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import ServerSettings
from server_app._app import create_app

# The apps are built at import (schemathesis reads their schemas at collection), before any
# fixture could give them a folder: this one is removed when the test process exits.
_ROOT = Path(tempfile.mkdtemp(prefix="fedmor-fuzz-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)

FUZZ_EXAMPLES = 10
_SETTINGS = hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True,
                                suppress_health_check=list(hypothesis.HealthCheck))

# -- the server, with one enrolled identity of each role --------------------------------------
_KEYS = {role: generate_key() for role in ("member", "aligner", "auditor", "operator")}


def _server() -> tuple[TestClient, dict[str, str]]:
    roster = _ROOT / "roster.json"
    tokens = {role: add_to_roster(roster, name=f"fuzz-{role}", public_key=public_key_b64(key),
                                  role=role)  # type: ignore[arg-type]
              for role, key in _KEYS.items()}
    tc = TestClient(create_app(ServerSettings(
        db_path=_ROOT / "s.db", identity_key=_ROOT / "s.pem", roster_file=roster,
        reward_timeout_s=1.0, public_urls=["http://testserver"])))
    ids = {}
    for role, key in _KEYS.items():
        resp = tc.post("/v1/enroll", json={"name": f"fuzz-{role}", "token": tokens[role],
                                            "public_key": public_key_b64(key),
                                            "clip_bound": 1.0})
        assert resp.status_code == 200, resp.text
        ids[role] = resp.json()["client_id"]
    return tc, ids


_SERVER, _IDS = _server()
server_schema = schemathesis.openapi.from_asgi("/openapi.json", _SERVER.app)
_MEMBER_PATHS = ("/v1/work", "/v1/reward/", "/v1/identity/clip-bound")


def _role(path: str) -> str:
    """The role the endpoint at ``path`` (a template) serves."""
    if path.startswith("/v1/rewards"):
        return "aligner"
    if path.startswith(("/v1/audit", "/v1/captures")):
        return "auditor"
    if path.startswith(_MEMBER_PATHS) or path.endswith(("/refusal", "/stages/{stage}")):
        return "member"
    return "operator"


# -- a member app, enrolled as far as it knows, that trusts one server key ----------------------
_SERVER_KEY = generate_key()
ClientStore(_ROOT / "c.db").put("client_id", "c-fuzz")


def _client() -> FastAPI:
    return create_client_app(ClientSettings(db_path=_ROOT / "c.db", identity_key=_ROOT / "c.pem",
                                            server_public_key=public_key_b64(_SERVER_KEY),
                                            public_urls=["http://testserver"]),
                             HashScorer())


_CLIENT = TestClient(_client())
client_schema = schemathesis.openapi.from_asgi("/openapi.json", _CLIENT.app)


def _send(tc: TestClient, case: schemathesis.Case, key: Ed25519PrivateKey | None, sender: str,
          recipient: str = SERVER_SENDER) -> None:
    """Send ``case`` signed by ``key`` as ``sender`` (unsigned without a key); assert the
    answer is no 5xx and a refusal says why."""
    path = case.formatted_path
    if case.query:
        path += "?" + urlencode(case.query, doseq=True)
    body = b""
    if case.method != "GET" and type(case.body).__name__ != "NotSet":
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    headers = {"content-type": case.media_type or "application/json"}
    if key is not None:
        headers |= sign_headers(key, sender=sender, method=case.method, path=path, body=body,
                                recipient=recipient, authority=authority_of(str(tc.base_url)))
    response = tc.request(case.method, path, content=body or None, headers=headers)
    assert response.status_code < 500, (case.method, path, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"], (case.method, path)


@server_schema.parametrize()
@_SETTINGS
def test_server_never_5xx(case: schemathesis.Case) -> None:
    if case.path == "/v1/enroll":  # the one endpoint for callers without an identity
        _send(_SERVER, case, None, "")
        return
    role = _role(case.path)
    _send(_SERVER, case, _KEYS[role], _IDS[role])


@client_schema.parametrize()
@_SETTINGS
def test_client_never_5xx(case: schemathesis.Case) -> None:
    _send(_CLIENT, case, _SERVER_KEY, SERVER_SENDER, recipient="c-fuzz")


def test_every_endpoint_documented() -> None:
    paths = _SERVER.app.openapi()["paths"]  # type: ignore[attr-defined]
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
