"""The consortium server: ``create_app(settings) -> FastAPI``, the state and one router
module per area (enrollment, rounds, router versions, work and pull queries, alignment,
health and metrics)."""


import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

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
    periodically,
)
from sdk.wire import check_private_files, key_passphrase, load_or_create_key, tls_verify
from server_app._capture import ServerCapture
from server_app._console._api import CONSOLE_PATH, install_console
from server_app._console._page import ConsoleSources
from server_app._identity._access import ADMIN, Access
from server_app._identity._identities import Identities
from server_app._rewards._broker import RewardBroker
from server_app._rewards._service import AlignmentService
from server_app._rounds._manager import RoundManager
from server_app._rounds._work import Signal, store_watch
from server_app._router._config import RouterLineages
from server_app._routes._announce import clip_bound_router
from server_app._routes._audit import install_audit
from server_app._routes._audit_budget import audit_budget_router
from server_app._routes._enroll import enrollment_router
from server_app._routes._identity import identity_router
from server_app._routes._meta import install_server_ops, meta_router
from server_app._routes._ops import operator_router
from server_app._routes._rewards import rewards_router
from server_app._routes._rotations import rotations_router
from server_app._routes._rounds import rounds_router
from server_app._routes._router import router_versions_router
from server_app._routes._work import install_work_routes
from server_app._settings import ServerSettings
from server_app._store import Store
from server_app._store._retention import purge_server

__all__ = ["create_app", "create_app_from_env"]

_log = logging.getLogger("fedmor.server")


def _lifespan(cfg: ServerSettings, store: Store, rounds: RoundManager, broker: RewardBroker,
              identities: Identities, work: Signal
              ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Run the deadline ticker, the store watcher and the retention purge while the app serves;
    close the broker's clients after."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Sync endpoints and checks run on this pool, sized above every cap: no one caller
        # can hold all of its threads.
        anyio.to_thread.current_default_thread_limiter().total_tokens = cfg.limits.worker_threads

        def tick() -> None:  # deadlines fire even when no client calls in
            rounds.tick()
            identities.tick()

        if cfg.preload_dp_accountant:  # any operator may open a DP round over REST
            preload_accountant()
        _log.info("fedmor server %s: store %s, %d enrolled member(s)", __version__, cfg.db_path,
                  len(store.clients()))
        async with (periodically(tick, cfg.tick_interval_s, "deadline tick"),
                    periodically(store_watch(store, work), cfg.work_recheck_s,
                                 "reading the store's data version", at_start=True),
                    cfg.retention.purging(lambda: purge_server(store, cfg.retention))):
            yield
        identities.flush_seen()
        await broker.aclose()

    return lifespan


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """Build the server app; the store, identity key and roster are opened immediately."""
    cfg = settings or ServerSettings()
    if not cfg.allow_readable_files:
        check_private_files(cfg.db_path, cfg.identity_key, cfg.tls_key)
    store = Store(cfg.db_path, images_bytes=cfg.retention.images_bytes)
    lineages = RouterLineages(store)
    lineages.check_declared(cfg.router)  # a changed [router] needs a lineage
    for member in store.clients("member"):  # a head for each member (one enrolled as we fell)
        lineages.join(member.name)
    key = load_or_create_key(cfg.identity_key, key_passphrase(cfg.identity_key_passphrase_file))
    work = Signal()  # bumped when a round opens or moves on, or a pull query is queued
    capture = None  # capture mode: told of captured rounds and of every answered query
    if cfg.capture.enabled:
        capture = ServerCapture(store, cfg.capture, router=cfg.alignment.router,
                                encoder=cfg.alignment.encoder, members=cfg.alignment.members)
    rounds = RoundManager(store, default_deadline_s=cfg.stage_deadline_s, on_change=work.bump,
                          capture=capture)
    verify = tls_verify(cfg.tls_ca)
    broker = RewardBroker(store, key, timeout_s=cfg.reward_timeout_s, poll_s=cfg.reward_poll_s,
                          verify=verify, per_member=cfg.reward_concurrency_per_member,
                          on_queue=work.bump, allow_private=cfg.allow_private_reward_urls,
                          on_scored=None if capture is None else capture.reward_query)
    access = Access(store, cfg)
    identities = Identities(store, access, rounds, cfg.roster_file, broker)
    if cfg.roster_file is not None and cfg.roster_file.exists():
        identities.sync_roster()

    app = FastAPI(title="fedmor server", version=__version__,
                  lifespan=_lifespan(cfg, store, rounds, broker, identities, work),
                  responses=ERROR_RESPONSES, **docs_ui(cfg.docs_ui),
                  description="Consortium server: enrollment, secure router rounds, router "
                              "versions and the reward-query broker. See docs/rest-api.md.")
    app.state.store, app.state.rounds, app.state.broker = store, rounds, broker
    app.state.settings = cfg
    install_errors(app)
    limits = Limiter(cfg.limits)
    app.add_middleware(SizeLimit, limit=cfg.max_request_bytes,
                       control_limit=cfg.max_control_bytes,
                       body_timeout_s=cfg.connections.body_timeout_s, auth=HeaderAuth(
        public_key_of=access.key_of, cached_key_of=access.cached_key_of,
        max_skew_s=cfg.max_clock_skew_s, authorities=access.authorities,
        retired_keys_of=lambda sender: access.retired_keys_of(sender),
        admin_token=cfg.admin_token, bearer_identity=ADMIN, role_of=access.role_of, limiter=limits,
        anonymous_paths=HeaderAuth.PROBES | {"/v1/enroll", CONSOLE_PATH},
        anonymous_prefixes=(CONSOLE_PATH + "/",)))  # the console checks its session cookie
    install_server_ops(app, store, limits, broker, access.operator_view)
    install_limits(app, limits)  # the outermost middleware: a refusal costs nothing more

    app.state.access = access
    app.include_router(identity_router(identities, access))
    app.include_router(rotations_router(identities, access))
    app.state.rewards = AlignmentService(store, broker, cfg.alignment)
    app.include_router(rewards_router(app.state.rewards, access))
    install_audit(app, store, capture, broker, access, cfg)
    app.include_router(audit_budget_router(store, access, cfg.audit))
    app.include_router(meta_router(rounds.recovered))
    app.include_router(enrollment_router(store, key, cfg, rounds.lineages))
    app.include_router(clip_bound_router(store, broker, access, cfg))
    app.include_router(rounds_router(rounds, access, work, limits))
    app.include_router(operator_router(identities, rounds, access))
    app.include_router(router_versions_router(store, access, rounds.lineages))
    install_work_routes(app, store, rounds, work, access, limits, broker)
    install_console(app, ConsoleSources(store, identities, rounds, app.state.rewards, capture),
                    access, cfg.console, tls=cfg.tls_cert is not None)
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from ``FEDMOR_SERVER_*`` variables."""
    return create_app(ServerSettings())
