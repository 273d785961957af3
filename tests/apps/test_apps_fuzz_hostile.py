"""The hostile-peer profile of the schemathesis run: each generated request of both apps is
turned hostile before it is sent, signed by a caller the endpoint accepts (so it reaches the
handler's own checks): every number in the body, query and path becomes an extreme value
(1e308, -1e308, Infinity, NaN, "-inf" as a string, huge integers), and every image becomes an
oversized or truncated PNG. No answer is a 5xx, and a refused request stores nothing."""

from __future__ import annotations

import atexit
import base64
import hashlib
import itertools
import json
import shutil
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from sdk.membership import add_to_roster
from sdk.wire import SERVER_SENDER, generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from server_app import ServerSettings
from server_app._app import create_app

_ROOT = Path(tempfile.mkdtemp(prefix="fedmor-hostile-fuzz-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)

EXTREMES: list[Any] = [1e308, -1e308, float("inf"), float("-inf"), float("nan"), "-inf",
                       "NaN", "Infinity", 10**30, -(10**30), 2**63, -(2**63) - 1, 1e-320]
"""Numbers a hostile peer sends; JSON floats inf/nan travel as the bare Infinity/NaN tokens."""


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def _declared_png(width: int, height: int, rows: int = 4) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` RGB pixels, with ``rows`` rows of
    data: tiny on the wire, huge once decoded."""
    data = zlib.compress((b"\0" + b"\0" * 3 * width) * rows)
    return (b"\x89PNG\r\n\x1a\n"
            + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _png_chunk(b"IDAT", data) + _png_chunk(b"IEND", b""))


_SMALL = _declared_png(16, 16, rows=16)
HOSTILE_IMAGES = [
    _declared_png(30_000, 30_000),  # a decompression bomb (PIL's own limit)
    _declared_png(5_000, 3_000),  # over the 1024 px a side limit
    _SMALL[: len(_SMALL) // 2],  # truncated mid-IDAT
    _declared_png(64, 64, rows=8)[:-12],  # rows missing, no IEND
    b"\x89PNG\r\n\x1a\n" + b"\xff" * 64,  # a PNG signature over garbage
]


class Hostile:
    """Deterministic hostile values: every number and image in turn, across all cases."""

    def __init__(self) -> None:
        self._numbers = itertools.cycle(EXTREMES)
        self._images = itertools.cycle(HOSTILE_IMAGES)

    def number(self) -> Any:
        return next(self._numbers)

    def value(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every number replaced and every image made hostile."""
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if isinstance(value, int | float):
            return self.number()
        if isinstance(value, list):
            return [self.value(v) for v in value]
        out = {k: self.value(v) for k, v in value.items()}
        if "image_b64" in out or "image_sha256" in out:
            image = next(self._images)
            out["image_b64"] = base64.b64encode(image).decode()
            out["image_sha256"] = hashlib.sha256(image).hexdigest()
        return out

    def params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """Query or path parameters: numbers become extreme values, as text."""
        out = {}
        for name, value in (params or {}).items():
            hostile = self.number() if _numeric(value) else value
            out[name] = json.dumps(hostile) if not isinstance(hostile, str) else hostile
        return out


def _numeric(value: Any) -> bool:
    """A number, or a parameter's text that reads as one (generated parameters are text)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _request(case: schemathesis.Case, hostile: Hostile) -> tuple[str, bytes]:
    """The hostile path (with its query) and body of ``case``."""
    path = case.path
    for name, value in hostile.params(case.path_parameters).items():
        path = path.replace("{" + name + "}", value)
    query = hostile.params(case.query)
    if query:
        path += "?" + urlencode(query)
    body = b""
    if case.method != "GET" and type(case.body).__name__ != "NotSet":
        if isinstance(case.body, bytes):  # a binary body: hostile bytes of its own
            body = struct.pack("<2d", 1e308, float("nan")) + case.body
        else:
            body = json.dumps(hostile.value(case.body)).encode()  # allow_nan: bare tokens
    return path, body


def _counts(read: Any, tables: tuple[str, ...]) -> dict[str, int]:
    return {t: int(read(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in tables}


# -- the server: admin token, a signed member and a signed aligner ------------------------------
_MEMBER_KEY, _ALIGNER_KEY = generate_key(), generate_key()


def _server() -> tuple[TestClient, dict[str, str]]:
    roster = _ROOT / "roster.json"
    tokens = {name: add_to_roster(roster, name=name, public_key=public_key_b64(key), role=role)
              for name, key, role in (("m0", _MEMBER_KEY, "member"),
                                      ("job", _ALIGNER_KEY, "aligner"))}
    tc = TestClient(create_app(ServerSettings(
        db_path=_ROOT / "s.db", identity_key=_ROOT / "s.pem", roster_file=roster,
        admin_token="adm", reward_timeout_s=1.0,  # type: ignore[arg-type]
        public_urls=["http://testserver"])))
    ids = {}
    for name, key in (("m0", _MEMBER_KEY), ("job", _ALIGNER_KEY)):
        resp = tc.post("/v1/enroll", json={"name": name, "token": tokens[name],
                                            "public_key": public_key_b64(key), "clip_bound": 1.0})
        ids[name] = resp.json()["client_id"]
    return tc, ids


_SERVER, _IDS = _server()
_SERVER_TABLES = ("clients", "rounds", "stage_messages", "round_refusals", "router_versions",
                  "images", "client_images", "reward_queries", "online_router")
_MEMBER_PATHS = ("/v1/work", "/v1/reward/", "/v1/rounds/{round_id}/stages",
                 "/v1/rounds/{round_id}/refusal")
server_schema = schemathesis.openapi.from_asgi("/openapi.json", _SERVER.app)

# -- a member app, enrolled as far as it knows, that trusts one server key ----------------------
_SERVER_KEY = generate_key()
_TESTSERVER = authority_of("http://testserver")  # both test clients' address
_CLIENT_DB = _ROOT / "c.db"
ClientStore(_CLIENT_DB).put("client_id", "c-fuzz")
_CLIENT = TestClient(create_client_app(ClientSettings(
    db_path=_CLIENT_DB, identity_key=_ROOT / "c.pem",
    server_public_key=public_key_b64(_SERVER_KEY), public_urls=["http://testserver"]),
    HashScorer()))
_CLIENT_TABLES = ("images", "query_audit", "rounds", "sent")
client_schema = schemathesis.openapi.from_asgi("/openapi.json", _CLIENT.app)

_SETTINGS = hypothesis.settings(max_examples=6, deadline=None, derandomize=True,
                                suppress_health_check=list(hypothesis.HealthCheck))
_HOSTILE = Hostile()


def _check(response: Any, before: dict[str, int], after: dict[str, int], what: str) -> None:
    assert response.status_code < 500, (what, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"], what
        assert after == before, (what, response.status_code, "stored something")


@server_schema.parametrize()
@_SETTINGS
def test_server_survives_hostile_peers(case: schemathesis.Case) -> None:
    path, body = _request(case, _HOSTILE)
    headers = {"content-type": "application/octet-stream" if isinstance(case.body, bytes)
               else "application/json"}
    if case.path.startswith("/v1/rewards"):
        headers |= sign_headers(_ALIGNER_KEY, sender=_IDS["job"], method=case.method,
                                path=path, body=body, authority=_TESTSERVER)
    elif case.path.startswith(_MEMBER_PATHS):
        headers |= sign_headers(_MEMBER_KEY, sender=_IDS["m0"], method=case.method, path=path,
                                body=body, authority=_TESTSERVER)
    else:
        headers["authorization"] = "Bearer adm"
    read = _SERVER.app.state.store.read  # type: ignore[attr-defined]
    before = _counts(read, _SERVER_TABLES)
    response = _SERVER.request(case.method, path, content=body or None, headers=headers)
    _check(response, before, _counts(read, _SERVER_TABLES), f"{case.method} {path}")


@client_schema.parametrize()
@_SETTINGS
def test_member_app_survives_a_hostile_server(case: schemathesis.Case) -> None:
    path, body = _request(case, _HOSTILE)
    headers = sign_headers(_SERVER_KEY, sender=SERVER_SENDER, method=case.method, path=path,
                           body=body, recipient="c-fuzz", authority=_TESTSERVER)
    read = _CLIENT.app.state.store.read  # type: ignore[attr-defined]
    before = _counts(read, _CLIENT_TABLES)
    response = _CLIENT.request(case.method, path, content=body or None,
                               headers=headers | {"content-type": "application/json"})
    _check(response, before, _counts(read, _CLIENT_TABLES), f"{case.method} {path}")


@pytest.mark.parametrize("image", HOSTILE_IMAGES, ids=["bomb", "over-limit", "truncated",
                                                       "no-iend", "garbage"])
def test_every_hostile_image_is_a_422_that_stores_nothing(image: bytes) -> None:
    item = {"image_sha256": hashlib.sha256(image).hexdigest(), "prompt": "p", "response": "r",
            "image_b64": base64.b64encode(image).decode()}
    body = json.dumps({"items": [item]}).encode()
    headers = sign_headers(_SERVER_KEY, sender=SERVER_SENDER, method="POST", path="/v1/reward",
                           body=body, recipient="c-fuzz", authority=_TESTSERVER)
    read = _CLIENT.app.state.store.read  # type: ignore[attr-defined]
    before = _counts(read, _CLIENT_TABLES)
    response = _CLIENT.post("/v1/reward", content=body,
                            headers=headers | {"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert "image" in response.json()["detail"]
    assert _counts(read, _CLIENT_TABLES) == before


pytestmark = pytest.mark.filterwarnings("ignore")
