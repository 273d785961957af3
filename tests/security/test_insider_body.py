"""Finding 1 (third review): a correct signature proves who sent a request, not that the route
accepts that sender. Every route of both apps declares the roles that may call it; the header
check reads that declaration and the signer's role before a byte of the body, so an enrolled
insider whose role a route refuses gets 403 having sent the server nothing it reads."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from client_app import ClientSettings, HashScorer
from client_app._app import create_client_app
from fedmor_local import LocalConsortium
from fedmor_local._insider import InsiderPost, insider_bodies, rss_mb
from sdk.wire import load_or_create_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from tests.apps.conftest import Member, enrolled_team

ROLES = {"m0": "member", "ops": "operator", "job": "aligner", "audit": "auditor"}
INSIDER_RSS_BOUND_MB = 64  # the stated bound (docs/threat-model.md): less than one body
BIG = 63 * 2**20  # the declared body: more than any limit a refused caller could be given
# Reachable without a role: probes, enrollment, the console pages (their own session cookie).
ANONYMOUS = re.compile(r"^(/v1/health|/v1/ready|/metrics|/openapi\.json|/v1/enroll|/console.*)$")


def declared_routes(app: FastAPI) -> list[tuple[str, str, frozenset[str] | None]]:
    """(method, concrete path, declared roles) of every documented operation of ``app``, as
    its OpenAPI document (the one published declaration) lists them."""
    out = []
    for path, ops in app.openapi()["paths"].items():
        for method, op in ops.items():
            roles = op.get("x-fedmor-roles")
            out.append((method.upper(), re.sub(r"\{[^}]+\}", "1", path),
                        None if roles is None else frozenset(roles)))
    return out


def call_unread(app: Any, method: str, path: str, headers: dict[str, str]) -> tuple[int, int]:
    """Call ``app`` with a request announcing ``BIG`` body bytes: its status and how many
    times it asked for the body (``receive``)."""
    asked = 0
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": b"x" * 2**16, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "server": ("testserver", 80),
             "client": ("127.0.0.1", 5000),
             "headers": [*raw, (b"host", b"testserver"), (b"content-length", str(BIG).encode()),
                         (b"content-type", b"application/json")]}
    asyncio.run(app(scope, receive, send))
    return status, asked


def test_every_route_declares_its_roles(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, ROLES)
    client = create_client_app(ClientSettings(db_path=tmp_path / "c.db",
                                              identity_key=tmp_path / "c.pem"), HashScorer())
    for app in (team["m0"].tc.app, client):
        routes = declared_routes(app)  # type: ignore[arg-type]
        assert len(routes) > 3
        undeclared = [(m, p) for m, p, roles in routes if roles is None and not ANONYMOUS.match(p)]
        assert not undeclared, f"routes without a for_roles declaration: {undeclared}"


def test_a_refused_role_gets_403_before_a_body_byte(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, ROLES)
    app = team["m0"].tc.app
    refused = 0
    for method, path, roles in declared_routes(app):  # type: ignore[arg-type]
        if roles is None:
            continue
        for name, member in team.items():
            if ROLES[name] in roles:
                continue
            status, asked = call_unread(app, method, path, _signed(member, method, path))
            assert (status, asked) == (403, 0), (name, method, path, status, asked)
            refused += 1
        if "admin" not in roles:
            status, asked = call_unread(app, method, path, {"authorization": "Bearer adm"})
            assert (status, asked) == (403, 0), ("admin", method, path, status, asked)
    assert refused > 40  # every role-refused (route, signer) pair of the server was tried


def test_an_allowed_role_gets_its_routes_limit(tmp_path: Path) -> None:
    team = enrolled_team(tmp_path, ROLES, max_request_bytes=2**22, max_control_bytes=2**16)
    app = team["m0"].tc.app
    # a control route: the control limit, refused from the declared length alone
    status, asked = call_unread(app, "POST", "/v1/rounds/1/refusal",
                                _signed(team["m0"], "POST", "/v1/rounds/1/refusal"))
    assert (status, asked) == (413, 0)
    # an upload route the member may call: its body is read (and bounded by the upload limit)
    stage = "/v1/rounds/1/stages/advertise"
    with team["m0"].tc as tc:
        r = tc.post(stage, content=b"x" * (2**22 + 1),
                    headers=_signed(team["m0"], "POST", stage, b"x" * (2**22 + 1)))
        assert r.status_code == 413 and "max_request_bytes" in r.json()["detail"]
        r = tc.post(stage, content=b"x" * 2**17, headers=_signed(team["m0"], "POST", stage,
                                                              b"x" * 2**17))
        assert r.status_code == 422, r.text  # read whole (past the control limit), then parsed


def _signed(member: Member, method: str, path: str, body: bytes = b"{}") -> dict[str, str]:
    return sign_headers(member.key, sender=member.client_id, method=method, path=path, body=body,
                        authority=authority_of(str(member.tc.base_url)))


def test_insiders_large_bodies_cost_the_server_nothing(tmp_path: Path) -> None:
    """Eight correctly signed 48 MiB bodies at once, from an enrolled member to operator,
    aligner and auditor routes and from an aligner to a stage route: each is refused 403 and
    the real server's resident memory grows by less than one body."""
    limit = 64 * 2**20
    with LocalConsortium(tmp_path, 1, identities={"job": "aligner"},
                         server={"max_request_bytes": limit}) as c:
        c.start_server()
        member = _enroll(c, c.client_cfg["site-0"])
        aligner = _enroll(c, c.identity_cfg["job"])
        posts = [InsiderPost(*member, "/v1/router"), InsiderPost(*member, "/v1/rewards"),
                 InsiderPost(*member, "/v1/audit/members/site-0/reward"),
                 InsiderPost(*aligner, "/v1/rounds/1/stages/update")] * 2
        pid = c.procs["server"].pid
        before = rss_mb(pid)
        statuses = insider_bodies(c.server_url, c.verify, posts, 48 * 2**20)
        grown = rss_mb(pid) - before
        assert statuses == [403] * len(posts)
        assert grown < INSIDER_RSS_BOUND_MB, f"server RSS grew {grown:.0f} MiB"


def _enroll(c: LocalConsortium, cfg: dict[str, Any]) -> tuple[Any, str]:
    key = load_or_create_key(Path(cfg["identity_key"]))
    resp = httpx.post(f"{c.server_url}/v1/enroll", verify=c.verify, timeout=60, json={
        "name": cfg["name"], "token": cfg["enrollment_token"], "public_key": public_key_b64(key)})
    assert resp.status_code == 200, resp.text
    return key, str(resp.json()["client_id"])
