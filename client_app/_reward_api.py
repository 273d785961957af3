"""The member's reward endpoint: ``POST /v1/reward`` answers the server's signed queries with
normalized, clipped scores (an ``APIRouter`` that ``create_client_app`` includes)."""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from client_app._service import RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk.serving import for_roles, signature_check
from sdk.wire import SERVER_SENDER, MissingImages, RewardRequest, RewardResponse

__all__ = ["RewardCallers", "install_reward_schemas", "reward_router"]

# /v1/reward reads its body itself (after authentication); its schema is documented by hand.
_REWARD_SCHEMAS = RewardRequest.model_json_schema(ref_template="#/components/schemas/{model}")
_REWARD_SCHEMAS = {"RewardRequest": _REWARD_SCHEMAS, **_REWARD_SCHEMAS.pop("$defs", {})}
_REWARD_BODY = {"required": True, "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/RewardRequest"}}}}
_REWARD_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"model": MissingImages, "description": "unknown image hash"},
    429: {"description": "rate limit or query budget exceeded"}}


def _parse(body: bytes) -> RewardRequest:
    try:
        return RewardRequest.model_validate_json(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


class RewardCallers:
    """Who may query this member (the server's key) and who it is (its client id), both read
    once from the store after enrollment, then fixed: no store read per query."""

    def __init__(self, cfg: ClientSettings, store: ClientStore) -> None:
        self._cfg, self._store = cfg, store
        self._server_key: str | None = cfg.server_public_key or None
        self._own: str | None = None
        # The host:port forms this app is reached at (its announced reward URL among them):
        # a query signed for another is refused.
        self.authorities = cfg.signed_authorities(
            host=cfg.host, port=cfg.port, tls_cert=cfg.tls_cert,
            also=[cfg.public_url] if cfg.public_url else [])

    def key_of(self, sender: str) -> str | None:
        if sender != SERVER_SENDER:
            return None
        if self._server_key is None:
            self._server_key = self._store.get("server_public_key")  # learned at enrollment
        return self._server_key

    def own_id(self) -> str:
        """This member's client id, the recipient of every signed query."""
        if self._own is None:
            stored = self._store.get("client_id")
            if stored is None:
                return "(not enrolled)"  # matches no request: nothing is addressed to it yet
            self._own = stored
        return self._own

    def use_nonce(self, sender: str, nonce: str, ts: float) -> bool:
        return self._store.use_nonce(sender, nonce, ts,
                                     keep_s=2 * self._cfg.max_clock_skew_s + 60)


def _timed(check: Callable[[], str], body: bytes, service: RewardService
           ) -> tuple[RewardResponse | MissingImages, float]:
    """Authentication first, then parsing and scoring, in one worker thread: each thread hop
    is a wake-up, and wake-ups are what a loaded machine makes slow."""
    who = check()
    req = _parse(body)
    started = time.perf_counter()
    out = service.score(who, req)
    return out, time.perf_counter() - started


def reward_router(cfg: ClientSettings, service: RewardService, ids: RewardCallers
                  ) -> APIRouter:
    """``POST /v1/reward`` over ``service``: only the server's signed queries addressed to this
    member (``ids``) are scored."""
    router = APIRouter(tags=["reward"])

    @router.post("/v1/reward", response_model=RewardResponse,
                 openapi_extra=for_roles(
                     SERVER_SENDER, upload=True, openapi_extra={"requestBody": _REWARD_BODY}), responses=_REWARD_ERRORS)
    async def reward(request: Request) -> Any:
        """Score a batch (a JSON ``RewardRequest``): normalized, clipped floats only; every query
        audited by hash."""
        started = time.perf_counter()
        check = await signature_check(request, public_key_of=ids.key_of,
                                      use_nonce=ids.use_nonce,
                                      max_skew_s=cfg.max_clock_skew_s, recipient=ids.own_id(),
                                      authorities=ids.authorities)
        out, scored_s = await run_in_threadpool(_timed, check, check.body, service)
        if isinstance(out, MissingImages):
            return JSONResponse(out.model_dump(), status_code=409)
        # Server-Timing: the caller can tell the time spent here (scoring, and all of this
        # handler) from its network and queueing time. Durations only, never inputs.
        timing = RewardResponse.timing_header(score=scored_s,
                                              app=time.perf_counter() - started)
        # Serialized once, not validated again against ``response_model`` (which documents it).
        return Response(out.model_dump_json(), media_type="application/json",
                        headers={"server-timing": timing})

    return router


def install_reward_schemas(app: FastAPI) -> None:
    """Add ``RewardRequest``'s schemas to ``app``'s OpenAPI document (the endpoint reads its
    body itself, so FastAPI does not find them)."""
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_REWARD_SCHEMAS)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
