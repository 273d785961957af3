"""The serving checks each made in one place: one 429 for every "too many requests" (the
concurrency caps and the per-minute limit both refuse with ``RateLimited``, answered with its
``Retry-After``: the caps' setting, a minute for the per-minute limit), and one admin-token
check, compared once per request."""

from __future__ import annotations

import asyncio
from collections import deque

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from sdk.serving import (
    Limiter,
    RateLimited,
    RequestLimits,
    check_bearer,
    install_errors,
    install_limits,
)
from sdk.wire import AuthError


def _app(held: asyncio.Event, release: asyncio.Event) -> FastAPI:
    app = FastAPI()
    install_errors(app)
    install_limits(app, Limiter(RequestLimits(anonymous=1, retry_after_s=7)))
    calls: deque[float] = deque()

    @app.get("/held")
    async def hold() -> dict[str, bool]:
        held.set()
        await release.wait()
        return {"ok": True}

    @app.get("/rated")
    def rated() -> dict[str, bool]:
        RateLimited.per_minute(calls, 1, "caller")
        return {"ok": True}

    return app


def test_both_limiters_answer_429_with_their_retry_after() -> None:
    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        held, release = asyncio.Event(), asyncio.Event()
        transport = httpx.ASGITransport(app=_app(held, release))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            holder = asyncio.create_task(client.get("/held"))
            await held.wait()  # the one anonymous slot is taken
            capped = await client.get("/rated")
            release.set()
            assert (await holder).status_code == 200
            first = await client.get("/rated")
            assert first.status_code == 200
            return capped, first, await client.get("/rated")

    capped, _, rated = asyncio.run(run())
    assert capped.status_code == 429, capped.text
    assert capped.headers["retry-after"] == "7"  # limits.retry_after_s
    assert "limits.anonymous" in capped.json()["detail"]
    assert rated.status_code == 429, rated.text
    # until the first call leaves the minute's window: at most the minute, less as time passed
    assert 1 <= int(rated.headers["retry-after"]) <= 60
    assert "in the last minute" in rated.json()["detail"]



def _scope(header: bytes | None) -> dict[str, object]:
    return {"type": "http", "headers": [] if header is None else [(b"authorization", header)]}


def test_the_admin_token_is_checked_once_per_request() -> None:
    token = SecretStr("s3cret-token")
    for wrong in (None, b"Bearer nope", b"Bearer s3cret-token2", b"s3cret-token"):
        with pytest.raises(AuthError, match="missing or wrong admin bearer token") as refused:
            check_bearer(_scope(wrong), token)
        assert refused.value.status == 401
    with pytest.raises(AuthError, match="no admin_token configured") as off:
        check_bearer(_scope(b"Bearer s3cret-token"), None)
    assert off.value.status == 403
    scope = _scope(b"Bearer s3cret-token")
    check_bearer(scope, token)  # the header check's comparison
    scope["headers"] = []  # the route's check reads the verdict, it does not compare again
    check_bearer(scope, token)
