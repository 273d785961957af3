"""The hospital's client app: ``create_client_app(settings, scorer) -> FastAPI``."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from client_app._policy import describe_policy
from client_app._retention import purge_client
from client_app._runner import ClientRunner, resolve_update_fn
from client_app._scorer import Scorer, load_object
from client_app._service import RateLimited, RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk._version import __version__
from sdk.wire import (
    ERROR_RESPONSES,
    SERVER_SENDER,
    Health,
    MissingImages,
    RewardRequest,
    RewardResponse,
    SizeLimit,
    StoredGauge,
    check_private_files,
    docs_ui,
    install_errors,
    install_ops,
    load_or_create_key,
    purging,
    signature_check,
)

__all__ = ["create_client_app", "create_client_app_from_env"]

_log = logging.getLogger("fedmor.client")
DEMO_HEADER = "x-fedmor-demo"


# /v1/reward reads its body itself (after authentication); its schema is documented by hand.
_REWARD_SCHEMAS = RewardRequest.model_json_schema(ref_template="#/components/schemas/{model}")
_REWARD_SCHEMAS = {"RewardRequest": _REWARD_SCHEMAS, **_REWARD_SCHEMAS.pop("$defs", {})}
_REWARD_BODY = {"required": True, "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/RewardRequest"}}}}


async def _rate_limited(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=429, headers={"retry-after": "60"})


def _clip_bound(cfg: ClientSettings, scorer: Scorer) -> float:
    """The bound c of the answers: the settings' override, else the scorer's own (one source:
    a trained scorer's normalizer), else sdk.reward's default for a scorer that declares none."""
    if cfg.clip is not None:
        return cfg.clip
    own = getattr(scorer, "clip", None)
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return float(own)
    from sdk.reward import DEFAULT_CLIP  # torch: only for a scorer that declares no bound

    return DEFAULT_CLIP


class _DemoHeader:
    """ASGI middleware: every response of a demo-mode app says so (``x-fedmor-demo: true``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def marked(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (DEMO_HEADER.encode(), b"true")]
            await send(message)

        await self.app(scope, receive, marked)


def _configured_scorer(cfg: ClientSettings) -> Scorer:
    """The site's reward model: ``reward_model_dir``, else ``scorer``, else (demo only) the
    hash scorer; otherwise the app refuses to start, naming the settings to fill."""
    if cfg.reward_model_dir is not None:
        from sdk.reward import ClientScorer

        return ClientScorer.from_pretrained(cfg.reward_model_dir, base=cfg.reward_base_dir,
                                            runtime=cfg.reward_runtime())
    name = cfg.scorer or ("client_app._scorer:HashScorer" if cfg.demo or
                          not cfg.policy.serve_rewards else None)
    if name is None:
        raise ValueError("no reward model configured: set reward_model_dir (an sdk.reward "
                         "checkpoint) or scorer (module:factory) in the client settings, or "
                         "policy.serve_rewards = false; demo = true (--demo) uses the hash "
                         "scorer instead")
    factory = load_object(name)
    return cast(Scorer, factory() if callable(factory) else factory)


def create_client_app(settings: ClientSettings | None = None, scorer: Scorer | None = None, *,
                      start_runner: bool = False) -> FastAPI:
    """Build the client app; with ``start_runner`` it also enrolls and runs rounds in a
    background thread while it serves."""
    cfg = settings or ClientSettings()
    if not cfg.allow_readable_files:
        check_private_files(cfg.db_path, cfg.identity_key, cfg.tls_key)
    scorer = scorer or _configured_scorer(cfg)
    # Refuses to start without one (unless it takes part in no rounds).
    update_fn = resolve_update_fn(cfg) if start_runner and cfg.run_rounds else None
    store = ClientStore(cfg.db_path)
    key = load_or_create_key(cfg.identity_key)
    service = RewardService(store, scorer, clip=_clip_bound(cfg, scorer), policy=cfg.policy,
                            rate_per_minute=cfg.rate_limit_per_minute,
                            decoded_cache_bytes=cfg.decoded_cache_bytes,
                            max_image_side=cfg.max_image_side)
    if cfg.demo:
        _log.warning("DEMO MODE: stand-ins answer for whatever is not configured (hash-scorer "
                     "rewards, random router updates); every reward answer carries %s: true",
                     DEMO_HEADER)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runner = ClientRunner(cfg, store=store, key=key, service=service,
                              update_fn=update_fn) if start_runner else None
        task = asyncio.create_task(asyncio.to_thread(runner.run_forever)) if runner else None
        app.state.runner, app.state.runner_task = runner, task
        _log.info("fedmor client %s (%s): rounds %s; policy: %s", __version__, cfg.name,
                  "on" if runner else "off", describe_policy(cfg.policy).replace("\n", "; "))
        async with purging(lambda: purge_client(store, cfg.retention, cfg.policy),
                           cfg.retention.interval_s):
            yield
        if runner is not None and task is not None:
            runner.stop.set()
            await asyncio.wait([task])  # a worker that died was reported by /v1/health
            if not task.cancelled() and task.exception() is not None:
                _log.error("the round and query worker had stopped: %r", task.exception())
            runner.close()

    app = FastAPI(title="fedmor client", version=__version__, lifespan=lifespan,
                  responses=ERROR_RESPONSES, **docs_ui(cfg.docs_ui),
                  description="A member's client app: answers the consortium's reward queries "
                              "with normalized, clipped scores. See docs/rest-api.md.")
    app.state.store, app.state.service, app.state.settings = store, service, cfg
    app.state.runner_task = None
    install_errors(app)
    app.add_exception_handler(RateLimited, _rate_limited)
    app.add_middleware(SizeLimit, limit=cfg.max_request_bytes)
    install_ops(app, prefix="fedmor_client", store=store, gauges=[
        StoredGauge.counting("fedmor_client_rounds", "this member's rounds by its own status "
                             "(done, refused, abandoned, ...)", "status", store,
                             "SELECT status, COUNT(*) FROM rounds GROUP BY status"),
        StoredGauge.counting("fedmor_client_refusals", "rounds this site's policy refused, by "
                             "reason", "reason", store,
                             "SELECT substr(detail, 1, instr(detail, ':') - 1), COUNT(*) FROM "
                             "rounds WHERE status='refused' GROUP BY 1"),
        StoredGauge.counting("fedmor_client_reward_items", "reward items scored, by caller",
                             "caller", store,
                             "SELECT caller, SUM(items) FROM query_audit GROUP BY caller"),
    ])
    if cfg.demo:
        app.add_middleware(_DemoHeader)

    server_key: list[str] = []  # learned at enrollment, then fixed: no store read per query

    def key_of(sender: str) -> str | None:
        if sender != SERVER_SENDER:
            return None
        if cfg.server_public_key:
            return cfg.server_public_key
        if not server_key:
            learned = store.get("server_public_key")
            if learned is None:
                return None
            server_key.append(learned)
        return server_key[0]

    own: list[str] = []  # this member's client id, the recipient of every signed query

    def own_id() -> str:
        if not own:
            stored = store.get("client_id")
            if stored is None:
                return "(not enrolled)"  # matches no request: nothing is addressed to it yet
            own.append(stored)
        return own[0]

    def use_nonce(sender: str, nonce: str, ts: float) -> bool:
        return store.use_nonce(sender, nonce, ts, keep_s=2 * cfg.max_clock_skew_s + 60)

    def parse(body: bytes) -> RewardRequest:
        try:
            return RewardRequest.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False)) from None

    @app.get("/v1/health", response_model=Health, tags=["meta"],
             responses={503: {"model": Health, "description": "the background worker died"}})
    def health() -> Any:
        """Liveness probe: 503 once the background worker (rounds, pull-mode queries) died."""
        task = app.state.runner_task
        if task is not None and task.done():
            error = None if task.cancelled() else task.exception()
            dead = Health(status="degraded", app="fedmor-client", version=__version__,
                          detail=f"the round and query worker stopped: {error!r}")
            return JSONResponse(dead.model_dump(), status_code=503)
        return Health(app="fedmor-client", version=__version__)

    @app.post("/v1/reward", response_model=RewardResponse, tags=["reward"],
              openapi_extra={"requestBody": _REWARD_BODY},
              responses={409: {"model": MissingImages, "description": "unknown image hash"},
                         429: {"description": "rate limit or query budget exceeded"}})
    async def reward(request: Request) -> Any:
        """Score a batch (a JSON ``RewardRequest``): normalized, clipped floats only; every query
        audited by hash."""
        started = time.perf_counter()
        check = await signature_check(request, public_key_of=key_of, use_nonce=use_nonce,
                                      max_skew_s=cfg.max_clock_skew_s,
                                      recipient=own_id())
        body = check.body
        scored_s = 0.0

        def serve() -> RewardResponse | MissingImages:
            # Authentication first, then parsing and scoring, in one worker thread: each thread
            # hop is a wake-up, and wake-ups are what a loaded machine makes slow.
            nonlocal scored_s
            who = check()
            req = parse(body)
            t = time.perf_counter()
            out = service.score(who, req)
            scored_s = time.perf_counter() - t
            return out

        out = await run_in_threadpool(serve)
        if isinstance(out, MissingImages):
            return JSONResponse(out.model_dump(), status_code=409)
        # Server-Timing: the caller can tell the time spent here (scoring, and all of this
        # handler) from its network and queueing time. Durations only, never inputs.
        timing = (f"score;dur={scored_s * 1e3:.2f}, "
                  f"app;dur={(time.perf_counter() - started) * 1e3:.2f}")
        # Serialized once, not validated again against ``response_model`` (which documents it).
        return Response(out.model_dump_json(), media_type="application/json",
                        headers={"server-timing": timing})

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(_REWARD_SCHEMAS)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def create_client_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from ``FEDMOR_CLIENT_*``; runs rounds."""
    return create_client_app(ClientSettings(), start_runner=True)
