"""A member app bounds each calling identity like the server does: the requests one signed
caller (the server, relaying every aligner's queries) may have in progress are capped, 429
beyond, counted from its verified headers before any body byte. In-process ASGI: the held
requests are bodies that stop arriving until the test lets them finish."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from client_app import ClientSettings, ClientStore, HashScorer
from client_app._app import create_client_app
from sdk.wire import SERVER_SENDER, generate_key, public_key_b64, sign_headers
from sdk.wire._auth import authority_of
from tests._images import png

MEMBER = "c-bounded"


async def _identified(http: httpx.AsyncClient) -> float:
    """The member app's gauge of requests in progress that count against an identity."""
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith('fedmor_client_requests_in_progress{pool="identified"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no identified gauge")


def test_one_caller_is_capped_at_the_member_app(tmp_path: Path) -> None:
    server_key = generate_key()
    ClientStore(tmp_path / "c.db").put("client_id", MEMBER)
    app = create_client_app(ClientSettings(
        db_path=tmp_path / "c.db", identity_key=tmp_path / "c.pem",
        server_public_key=public_key_b64(server_key),
        limits={"per_identity": 2, "long_polls_per_identity": 1},
        public_urls=["http://member"]), HashScorer())
    image = png(8)
    body = json.dumps({"items": [{
        "image_sha256": hashlib.sha256(image).hexdigest(),
        "image_b64": base64.b64encode(image).decode(), "prompt": "p", "response": "r"}]}).encode()
    release, holding = asyncio.Event(), asyncio.Event()
    read = 0

    async def stalled() -> AsyncIterator[bytes]:  # the body arrives once the test says so
        nonlocal read
        yield body[:5]
        read += 1  # the app asked for more: it was admitted and holds its slot
        if read == 2:
            holding.set()
        await release.wait()
        yield body[5:]

    def signed(path: str = "/v1/reward") -> dict[str, str]:
        return sign_headers(server_key, sender=SERVER_SENDER, method="POST", path=path,
                            body=body, recipient=MEMBER,
                            authority=authority_of("http://member")) | {"content-type": "application/json"}

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://member") as http:
            held = [asyncio.create_task(http.post("/v1/reward", content=stalled(),
                                                  headers=signed())) for _ in range(2)]
            await asyncio.wait_for(holding.wait(), 60)  # both admitted, reading their bodies
            assert await _identified(http) == 2 and not any(t.done() for t in held)
            third = await http.post("/v1/reward", content=body, headers=signed())
            assert third.status_code == 429, third.text
            assert third.headers["retry-after"]
            assert SERVER_SENDER in third.json()["detail"]
            assert "limits.per_identity" in third.json()["detail"]
            release.set()
            for done in await asyncio.gather(*held):
                assert done.status_code == 200, done.text  # scored once the body came
            after = await http.post("/v1/reward", content=body, headers=signed())
            assert after.status_code == 200, after.text  # the slots were given back

    asyncio.run(scenario())
