"""``sdk.wire.SignedClient`` and ``AsyncSignedClient`` against the real server app under uvicorn
on 127.0.0.1: enrollment unsigned, signed GET (with a query) and POST accepted, the admin token
accepted, a body changed on the way refused, the server's message carried by the error; one
scenario drives both clients."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fedmor_local import free_port
from sdk.membership import add_to_roster
from sdk.wire import (
    AsyncSignedClient,
    ClipBoundAck,
    EnrollRequest,
    EnrollResponse,
    MemberInfo,
    RequestRefused,
    RoundInfo,
    SignedClient,
    generate_key,
    public_key_b64,
)
from sdk.wire._auth import BAD_SIGNATURE, HEADER_CONTENT_SHA256
from server_app import ServerSettings
from server_app._app import create_app
from tests._serve import served

ADMIN = "admin-token-for-the-test"
Members = dict[str, tuple[Ed25519PrivateKey, str]]


def _forged(request: httpx.Request) -> httpx.Request:
    """``request`` with another clip bound in its body and the body's declared sha256 fixed up
    to match: only the signature can tell."""
    body = request.content.replace(b"2.0", b"9.0")
    headers = httpx.Headers(request.headers)
    headers[HEADER_CONTENT_SHA256] = hashlib.sha256(body).hexdigest()
    return httpx.Request(request.method, request.url, headers=headers, content=body)


class _Tamper(httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return super().handle_request(_forged(request))


class _AsyncTamper(httpx.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await super().handle_async_request(_forged(request))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Members]]:
    """The server app on a free port; yields its URL and each member's key and token."""
    tmp = tmp_path_factory.mktemp("signed_client")
    roster = tmp / "roster.json"
    keys = {name: generate_key() for name in ("sync", "async", "proxied")}
    members = {name: (key, add_to_roster(roster, name=name, public_key=public_key_b64(key)))
               for name, key in keys.items()}
    port = free_port()  # the settings name it: a signature names the port it dials
    cfg = ServerSettings(db_path=tmp / "s.db", identity_key=tmp / "id.pem", roster_file=roster,
                         admin_token=ADMIN, port=port)  # type: ignore[arg-type]
    with served(create_app(cfg), port) as url:
        yield url, members


async def _done(result: Any) -> Any:
    """A sync call's value, or an async call's awaited value: one scenario for both clients."""
    return await result if inspect.isawaitable(result) else result


async def _enroll(anonymous: Any, name: str, key: Ed25519PrivateKey, token: str) -> str:
    enrolled = await _done(anonymous.post(
        "/v1/enroll", EnrollRequest(name=name, token=token, public_key=public_key_b64(key)),
        EnrollResponse))
    return str(enrolled.client_id)


async def _scenario(url: str, name: str, key: Ed25519PrivateKey, token: str,
                    client: Callable[..., Any], tamper: Callable[[], Any]) -> None:
    anonymous = client(url)
    me = await _enroll(anonymous, name, key, token)
    signed = client(url, key=key, sender=me)
    # A query string is part of what is signed.
    assert await _done(signed.get("/v1/rounds?status=open", list[RoundInfo])) == []
    ack = await _done(signed.post("/v1/identity/clip-bound", {"clip_bound": 2.0},
                                  ClipBoundAck))
    assert isinstance(ack, ClipBoundAck) and ack.clip_bound == 2.0
    # The server's own message travels in the typed error.
    with pytest.raises(RequestRefused) as missing:
        await _done(signed.get("/v1/rounds/999", RoundInfo))
    assert missing.value.status == 404 and "999" in missing.value.reason
    assert (missing.value.method, missing.value.path) == ("GET", "/v1/rounds/999")
    assert missing.value.retry_after is None and "refused by the server (404)" in str(
        missing.value)
    with pytest.raises(RequestRefused) as labelled:  # the task it served, named instead
        await _done(signed.get("/v1/rounds/999", RoundInfo, what="round show"))
    assert str(labelled.value).startswith("round show refused by the server (404)")
    # Another key under the same id, and a body changed after signing: both refused.
    impostor = client(url, key=generate_key(), sender=me)
    with pytest.raises(RequestRefused) as stranger:
        await _done(impostor.get("/v1/rounds", list[RoundInfo]))
    assert stranger.value.status == 403 and stranger.value.reason == BAD_SIGNATURE
    forged = client(http=tamper(), key=key, sender=me)
    with pytest.raises(RequestRefused) as tampered:
        await _done(forged.post("/v1/identity/clip-bound", {"clip_bound": 2.0}))
    assert tampered.value.status == 403 and tampered.value.reason == BAD_SIGNATURE
    # The operator's fallback: the admin token, no identity key.
    admin = client(url, admin_token=ADMIN)
    members = await _done(admin.get("/v1/members", list[MemberInfo]))
    assert any(m.name == name and m.client_id == me for m in members)
    for c in (anonymous, signed, impostor, forged, admin):
        await _done(c.aclose() if isinstance(c, AsyncSignedClient) else c.close())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_signed_client_is_accepted_and_a_changed_body_refused(
        server: tuple[str, Members], kind: str) -> None:
    url, members = server
    if kind == "sync":
        asyncio.run(_scenario(url, kind, *members[kind], SignedClient,
                              lambda: httpx.Client(base_url=url, transport=_Tamper())))
    else:
        asyncio.run(_scenario(url, kind, *members[kind], AsyncSignedClient,
                              lambda: httpx.AsyncClient(base_url=url,
                                                        transport=_AsyncTamper())))


def test_a_base_url_path_is_left_out_of_the_signature(server: tuple[str, Members]) -> None:
    """A client whose base URL has a path (an app behind a prefix-stripping proxy) signs the
    path the app sees; a transport stands in for the proxy."""
    url, members = server
    key, token = members["proxied"]

    class _Proxy(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            path = request.url.path.removeprefix("/fedmor")
            return super().handle_request(httpx.Request(
                request.method, request.url.copy_with(path=path), headers=request.headers,
                content=request.content))

    with SignedClient(url) as anonymous:
        me = asyncio.run(_enroll(anonymous, "proxied", key, token))
    proxied = httpx.Client(base_url=f"{url}/fedmor", transport=_Proxy())
    with proxied, SignedClient(key=key, sender=me, http=proxied) as signed:
        assert signed.get("/v1/rounds?status=open", list[RoundInfo]) == []


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_answer_over_max_answer_bytes_is_refused(server: tuple[str, Members],
                                                    kind: str) -> None:
    """Either client reads an answer up to its ``max_answer_bytes`` and refuses a longer one,
    so the other party cannot choose how much this process holds."""
    url, _ = server

    async def health(limit: int) -> bytes:
        client = (SignedClient if kind == "sync" else AsyncSignedClient)(
            url, max_answer_bytes=limit)
        try:
            return bytes((await _done(client.request("GET", "/v1/health"))).content)
        finally:
            await _done(client.aclose() if isinstance(client, AsyncSignedClient)
                        else client.close())

    whole = asyncio.run(health(2**20))
    assert asyncio.run(health(len(whole))) == whole  # the bound itself is allowed
    with pytest.raises(httpx.DecodingError, match="max_answer_bytes"):
        asyncio.run(health(len(whole) - 1))
