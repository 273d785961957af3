"""The hospital's client app: ``create_client_app(settings, scorer) -> FastAPI``."""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast

import anyio.to_thread
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi import FastAPI

from client_app._meta_api import install_client_ops, meta_router
from client_app._policy import describe_policy
from client_app._retention import purge_client
from client_app._reward_api import RewardCallers, install_reward_schemas, reward_router
from client_app._router_update import UpdateFn, check_update_name, resolve_update_fn
from client_app._runner import ClientRunner
from client_app._scorer import load_object
from client_app._service import RewardService, Scorer
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk import __version__
from sdk.secagg import preload_accountant
from sdk.serving import (
    ERROR_RESPONSES,
    HeaderAuth,
    Limiter,
    SizeLimit,
    docs_ui,
    install_errors,
    install_limits,
)
from sdk.wire import check_private_files, key_passphrase, load_or_create_key

__all__ = ["create_client_app", "create_client_app_from_env", "site_reward_service"]

_log = logging.getLogger("fedmor.client")
DEMO_HEADER = "x-fedmor-demo"


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


def _expects_dp(cfg: ClientSettings, store: ClientStore) -> bool:
    """Whether this site will account DP rounds: its policy asks for DP, or it took part in
    one before. (Not for every site that may: the accountant holds a large share of the app's memory.)"""
    policy = cfg.policy
    return policy.require_dp or policy.max_epsilon is not None or bool(store.dp_ledger())


def site_reward_service(cfg: ClientSettings, store: ClientStore,
                        scorer: Scorer | None = None) -> RewardService:
    """The reward service the app serves ``/v1/reward`` with: the configured scorer (or
    ``scorer``), the site's clip bound, policy and limits; it records queries in ``store``.
    A member's self-audit (``fedmor audit --client-config``) scores through one of its own."""
    scorer = scorer or _configured_scorer(cfg)
    return RewardService(store, scorer, clip=_clip_bound(cfg, scorer), policy=cfg.policy,
                         rate_per_minute=cfg.rate_limit_per_minute,
                         decoded_cache_bytes=cfg.decoded_cache_bytes,
                         max_image_side=cfg.max_image_side)


def _lifespan(cfg: ClientSettings, store: ClientStore, key: Ed25519PrivateKey,
              service: RewardService, update_fn: UpdateFn | None, start_runner: bool
              ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """With ``start_runner``, run the round and query worker in a thread while the app
    serves; stop it and report how it ended after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Sync endpoints run on this pool, sized above every cap (as on the server).
        anyio.to_thread.current_default_thread_limiter().total_tokens = cfg.limits.worker_threads
        runner = ClientRunner(cfg, store=store, key=key, service=service,
                              update_fn=update_fn) if start_runner else None
        task = asyncio.create_task(asyncio.to_thread(runner.run_forever)) if runner else None
        if task is not None and runner is not None:
            # A revoked member's app stops too (``app.state.on_revoked``: the CLI's exit).
            task.add_done_callback(lambda _: runner.revoked and app.state.on_revoked())
        if runner is not None and _expects_dp(cfg, store):
            preload_accountant()  # not while a DP round's first stage waits for this site
        app.state.runner, app.state.runner_task = runner, task
        _log.info("fedmor client %s (%s): rounds %s; policy: %s", __version__, cfg.name,
                  "on" if runner else "off", describe_policy(cfg.policy).replace("\n", "; "))
        async with cfg.retention.purging(lambda: purge_client(store, cfg.retention, cfg.policy)):
            yield
        if runner is not None and task is not None:
            runner.stop.set()
            await asyncio.wait([task])  # a worker that died was reported by /v1/health
            if not task.cancelled() and task.exception() is not None:
                _log.error("the round and query worker had stopped: %r", task.exception())
            runner.close()

    return lifespan


def create_client_app(settings: ClientSettings | None = None, scorer: Scorer | None = None, *,
                      start_runner: bool = False, update_fn: UpdateFn | None = None) -> FastAPI:
    """Build the client app; with ``start_runner`` it also enrolls and runs rounds in a
    background thread while it serves (``update_fn``: a Python update function in place of
    the configured one, for a program that embeds the app; settings never name code)."""
    cfg = settings or ClientSettings()
    if not cfg.allow_readable_files:
        check_private_files(cfg.db_path, cfg.identity_key, cfg.tls_key)
    scorer = scorer or _configured_scorer(cfg)
    # Refuses to start without one (unless it takes part in no rounds); [router_training]'s
    # update is built by the runner, once it can fetch the consortium's configuration.
    rounds = start_runner and cfg.run_rounds
    if rounds and update_fn is None and cfg.router_training is not None:
        check_update_name(cfg.router_training.update)  # an unknown plug-in: refused here
    if rounds and update_fn is None and cfg.router_training is None:
        update_fn = resolve_update_fn(cfg)
    store = ClientStore.of(cfg)
    key = load_or_create_key(cfg.identity_key, key_passphrase(cfg.identity_key_passphrase_file))
    service = site_reward_service(cfg, store, scorer)
    if cfg.demo:
        _log.warning("DEMO MODE: stand-ins answer for whatever is not configured (hash-scorer "
                     "rewards, random router updates); every reward answer carries %s: true",
                     DEMO_HEADER)

    app = FastAPI(title="fedmor client", version=__version__,
                  lifespan=_lifespan(cfg, store, key, service, update_fn, start_runner),
                  responses=ERROR_RESPONSES, **docs_ui(cfg.docs_ui),
                  description="A member's client app: answers the consortium's reward queries "
                              "with normalized, clipped scores. See docs/rest-api.md.")
    app.state.store, app.state.service, app.state.settings = store, service, cfg
    app.state.runner_task = None
    app.state.on_revoked = lambda: None
    install_errors(app)
    ids = RewardCallers(cfg, store)
    limits = Limiter(cfg.limits)
    app.add_middleware(SizeLimit, limit=cfg.max_request_bytes,
                       control_limit=cfg.max_control_bytes,
                       body_timeout_s=cfg.connections.body_timeout_s, auth=HeaderAuth(
        public_key_of=ids.key_of, max_skew_s=cfg.max_clock_skew_s, recipient=ids.own_id,
        authorities=ids.authorities,
        limiter=limits, anonymous_paths=HeaderAuth.PROBES))
    install_client_ops(app, store, limits)
    install_limits(app, limits)  # outside the header check: a refusal costs nothing more
    if cfg.demo:
        app.add_middleware(_DemoHeader)
    app.include_router(meta_router())
    app.include_router(reward_router(cfg, service, ids))
    install_reward_schemas(app)
    return app


def create_client_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from ``FEDMOR_CLIENT_*``; runs rounds."""
    return create_client_app(ClientSettings(), start_runner=True)
