"""The consortium server: ``create_app(settings) -> FastAPI``."""


import asyncio
import logging
import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Any

import numpy as np
from fastapi import Depends, FastAPI, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from sdk._version import __version__
from sdk.wire import (
    ERROR_RESPONSES,
    EnrollRequest,
    EnrollResponse,
    Health,
    NotFoundError,
    PayloadError,
    PendingQuery,
    RewardAnswer,
    RosterFile,
    RoundCreate,
    RoundInfo,
    RoundRefusal,
    RouterRollback,
    RouterVersionInfo,
    SignatureCheck,
    SizeLimit,
    StageAck,
    StageBroadcast,
    StageSubmit,
    StoredGauge,
    Work,
    check_private_files,
    check_reward_url,
    docs_ui,
    install_errors,
    install_ops,
    load_or_create_key,
    public_key_b64,
    stage_payload,
)
from server_app._access import Access, Identity
from server_app._audit_api import install_audit
from server_app._broker import RewardBroker
from server_app._rewards import AlignmentService
from server_app._rewards_api import install_rate_limit, rewards_router
from server_app._rounds import RoundManager
from server_app._settings import ServerSettings
from server_app._store import ConflictError, Store
from server_app._work import Signal, find_work

__all__ = ["create_app", "create_app_from_env"]

_log = logging.getLogger("fedmor.server")
ENROLLMENT_REFUSED = ("enrollment refused: the name, token and key must match a roster entry "
                      "whose token is unused (ask the consortium operator)")
_STAGE = Path(pattern=r"^[a-z_]{1,40}$")
_STAGE_BODY = {"required": True, "content": {
    "application/json": {"schema": StageSubmit.model_json_schema()},
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}


def _initial_router(body: bytes) -> np.ndarray:
    """Parse a published router: whole little-endian float32 values, all finite."""
    if not body or len(body) % 4:
        raise PayloadError(f"a router is whole float32 values; got {len(body)} bytes")
    vector = np.frombuffer(body, dtype="<f4")
    if not np.isfinite(vector).all():
        raise PayloadError("the router holds non-finite values")
    return vector


def _version_info(row: dict[str, Any]) -> RouterVersionInfo:
    return RouterVersionInfo(version=row["version"], round_id=row["round_id"],
                             sha256=row["sha256"], size_bytes=len(row["blob"]),
                             length=row["length"], created_at=row["created_at"])


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """Build the server app; the store, identity key and roster are opened immediately."""
    cfg = settings or ServerSettings()
    if not cfg.allow_readable_files:
        check_private_files(cfg.db_path, cfg.identity_key, cfg.tls_key)
    store = Store(cfg.db_path)
    key = load_or_create_key(cfg.identity_key)
    if cfg.roster_file is not None:
        for entry in RosterFile.load(cfg.roster_file).clients:
            store.upsert_roster(entry.name, entry.public_key, entry.token_sha256, entry.role)
    work = Signal()  # bumped when a round opens or moves on, or a pull query is queued
    rounds = RoundManager(store, default_deadline_s=cfg.stage_deadline_s, on_change=work.bump)
    verify: Any = ssl.create_default_context(cafile=str(cfg.tls_ca)) if cfg.tls_ca else True
    broker = RewardBroker(store, key, timeout_s=cfg.reward_timeout_s, poll_s=cfg.reward_poll_s,
                          verify=verify, on_queue=work.bump)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def ticker() -> None:  # deadlines fire even when no client calls in
            while True:
                await asyncio.sleep(cfg.tick_interval_s)
                try:
                    await asyncio.to_thread(rounds.tick)
                except Exception:  # a failing tick must not stop all future deadlines
                    _log.exception("deadline tick failed")

        task = asyncio.create_task(ticker())
        _log.info("fedmor server %s: store %s, %d enrolled member(s)", __version__, cfg.db_path,
                  len(store.clients()))
        yield
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await broker.aclose()

    app = FastAPI(title="fedmor server", version=__version__, lifespan=lifespan,
                  responses=ERROR_RESPONSES, **docs_ui(cfg.docs_ui),
                  description="Consortium server: enrollment, secure router rounds, router "
                              "versions and the reward-query broker. See docs/rest-api.md.")
    app.state.store, app.state.rounds, app.state.broker = store, rounds, broker
    app.state.settings = cfg
    install_errors(app)
    app.add_middleware(SizeLimit, limit=cfg.max_request_bytes)
    install_ops(app, prefix="fedmor_server", store=store, gauges=[
        StoredGauge.counting("fedmor_server_rounds", "rounds by status", "status", store,
                             "SELECT status, COUNT(*) FROM rounds GROUP BY status"),
        StoredGauge.counting("fedmor_server_refusals", "members' policy refusals of rounds, "
                             "by reason", "reason", store,
                             "SELECT reason, COUNT(*) FROM round_refusals GROUP BY reason"),
        StoredGauge.counting("fedmor_server_reward_queries", "queued (pull-mode) reward "
                             "queries by member", "client_id", store,
                             "SELECT client_id, COUNT(*) FROM reward_queries GROUP BY client_id"),
    ])

    access = Access(store, cfg)
    app.state.access = access
    app.state.rewards = AlignmentService(store, broker, cfg.alignment)
    app.include_router(rewards_router(app.state.rewards, access))
    install_rate_limit(app)
    install_audit(app, store, rounds, broker, access, cfg)

    async def client_check(request: Request) -> SignatureCheck:
        """The signature check of ``request`` to run in the endpoint's own worker thread: the
        round endpoints then cost one thread hop, not two (auth, then the work). A hop is a
        wake-up, and on a busy machine each stage of a round waited for a few of them."""
        return await access.member_check(request)

    Client = Annotated[str, Depends(access.member)]
    ClientCheck = Annotated[SignatureCheck, Depends(client_check)]
    Caller = Annotated[Identity, Depends(access.caller)]

    def json_response(model: StageAck | StageBroadcast) -> Response:
        # Serialized once here, not validated again against ``response_model`` (which still
        # documents it): these are the hot endpoints of every stage.
        return Response(model.model_dump_json(), media_type="application/json")

    @app.get("/v1/health", response_model=Health, tags=["meta"])
    def health() -> Health:
        """Liveness probe."""
        return Health(app="fedmor-server", version=__version__)

    @app.post("/v1/enroll", response_model=EnrollResponse, tags=["enrollment"])
    def enroll(req: EnrollRequest) -> EnrollResponse:
        """Trade a one-time token plus the roster's identity key for a client id."""
        if req.reward_url is not None:
            check_reward_url(req.reward_url, allow_http=cfg.allow_http_reward_urls)
        try:
            row, created = store.enroll(name=req.name, token=req.token,
                                        public_key=req.public_key, reward_url=req.reward_url,
                                        new_id=f"c-{uuid.uuid4().hex[:12]}",
                                        clip_bound=req.clip_bound)
        except (PermissionError, ConflictError) as exc:
            # The reason (which names are on the roster, whose token was used) stays in the
            # operator's log; the caller learns only that it was refused.
            _log.warning("enrollment refused: %s", exc)
            raise PermissionError(ENROLLMENT_REFUSED) from None
        if created:
            store.audit(row["client_id"], "enrolled", name=req.name)
            _log.info("enrolled %s as %s", req.name, row["client_id"])
        return EnrollResponse(client_id=row["client_id"], name=row["name"],
                              server_public_key=public_key_b64(key), role=row["role"])

    @app.post("/v1/rounds", response_model=RoundInfo, tags=["rounds"],
              dependencies=[Depends(access.operator)])
    def create_round(req: RoundCreate) -> RoundInfo:
        """Open a round (admin token, or a signed ``operator`` identity)."""
        info = rounds.create(req)
        _log.info("round %d opened: %s over %d participants", info.round_id, info.kind,
                  len(info.participants))
        return info

    @app.get("/v1/rounds", response_model=list[RoundInfo], tags=["rounds"])
    def list_rounds(_: Caller, status: Annotated[str | None, Query(
            pattern="^(open|finished|failed)$")] = None) -> list[RoundInfo]:
        """All rounds, oldest first."""
        return rounds.list(status)

    @app.get("/v1/rounds/{round_id}", response_model=RoundInfo, tags=["rounds"])
    def get_round(_: Caller, round_id: Annotated[int, Path(ge=1, le=2**62)]) -> RoundInfo:
        """Status of one round."""
        return rounds.info(round_id)

    @app.post("/v1/rounds/{round_id}/stages/{stage}", response_model=StageAck, tags=["rounds"],
              openapi_extra={"requestBody": _STAGE_BODY})
    async def submit(request: Request, check: ClientCheck,
                     round_id: Annotated[int, Path(ge=1, le=2**62)],
                     stage: Annotated[str, _STAGE],
                     wait_next_s: Annotated[float, Query(ge=0, le=30)] = 0.0) -> Response:
        """A client's message for one stage; acknowledged once committed. JSON
        ``{"payload": {...}}``, or the raw bytes of a bulk message (masked input, plain update)
        as ``application/octet-stream``. ``wait_next_s`` > 0 also waits (that long at most) for
        the next stage's input and returns it in ``next``."""
        media, body = request.headers.get("content-type", ""), check.body

        def run() -> StageAck:
            client = access.as_member(check())  # authentication first, as with a dependency
            return rounds.submit(round_id, stage, client, stage_payload(media, body),
                                 wait_next_s, body_sha256=check.body_sha256)

        return json_response(await run_in_threadpool(run))

    @app.post("/v1/rounds/{round_id}/refusal", response_model=RoundInfo, tags=["rounds"])
    def refuse(client: Client, round_id: Annotated[int, Path(ge=1, le=2**62)],
               body: RoundRefusal) -> RoundInfo:
        """A participant's site policy refuses the round: it sends nothing more there; the
        refusal and its reason show in the round's ``refusals`` (idempotent)."""
        _log.warning("client %s refused round %d: %s (%s)", client, round_id, body.reason,
                     body.detail)
        return rounds.refuse(round_id, client, body.reason, body.detail)

    @app.get("/v1/rounds/{round_id}/stages/{stage}", response_model=StageBroadcast,
             tags=["rounds"])
    async def stage_input(check: ClientCheck, round_id: Annotated[int, Path(ge=1, le=2**62)],
                          stage: Annotated[str, _STAGE],
                          wait_s: Annotated[float, Query(ge=0, le=30)] = 0.0) -> Response:
        """The server's input for this client's stage (``ready`` false until available);
        ``wait_s`` > 0 holds the request until it is ready or that time passed."""
        return json_response(await run_in_threadpool(
            lambda: rounds.broadcast(round_id, stage, access.as_member(check()),
                                     wait_s=wait_s)))

    @app.get("/v1/router/latest", response_model=RouterVersionInfo, tags=["router"])
    def router_latest(_: Caller) -> RouterVersionInfo:
        """Metadata and sha256 of the newest global router."""
        row = store.version()
        if row is None:
            raise NotFoundError("no router version exists yet")
        return _version_info(row)

    @app.post("/v1/router", response_model=RouterVersionInfo, tags=["router"],
              dependencies=[Depends(access.admin)],
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/octet-stream": {"schema": {"type": "string",
                                                          "format": "binary"}}}}})
    async def router_initial(request: Request) -> RouterVersionInfo:
        """Publish the federation's starting router (admin): little-endian float32 parameters,
        accepted only while no version exists. Rounds then sum deltas from it, which one
        fixed-point clip range holds."""
        vector = _initial_router(await request.body())
        if store.version() is not None:
            raise ConflictError("a router version exists already; rounds build on it")
        version = store.add_version(None, vector.tobytes(), int(vector.shape[0]))
        store.audit("admin", "router_published", version=version)
        row = store.version(version)
        assert row is not None
        return _version_info(row)

    @app.get("/v1/router/{version}", tags=["router"], response_class=Response,
             responses={200: {"content": {"application/octet-stream": {}},
                              "description": "little-endian float32 router parameters"}})
    def router_blob(_: Caller, version: Annotated[int, Path(ge=1, le=2**62)]) -> Response:
        """The parameters of one router version; header ``x-fedmor-sha256`` is their hash."""
        row = store.version(version)
        if row is None:
            raise NotFoundError(f"router version {version} does not exist")
        return Response(bytes(row["blob"]), media_type="application/octet-stream",
                        headers={"x-fedmor-sha256": row["sha256"]})

    @app.post("/v1/router/rollback", response_model=RouterVersionInfo, tags=["router"],
              dependencies=[Depends(access.admin)])
    def router_rollback(req: RouterRollback) -> RouterVersionInfo:
        """Publish an earlier router version again as the newest (admin): members fetch it as
        ``latest`` and the next round starts from it. Nothing is deleted; versions only grow."""
        row = store.version(req.version)
        if row is None:
            raise NotFoundError(f"router version {req.version} does not exist")
        with store.transaction():
            version = store.add_version(None, bytes(row["blob"]), int(row["length"]))
            store.audit("admin", "router_rolled_back", restored=req.version, version=version)
        out = store.version(version)
        assert out is not None
        return _version_info(out)

    @app.get("/v1/reward/pending", response_model=list[PendingQuery], tags=["reward"])
    def pending(client: Client) -> list[PendingQuery]:
        """Pull mode: this client's queued reward queries."""
        return [PendingQuery.model_validate(q) for q in store.pending_queries(client)]

    @app.get("/v1/work", response_model=Work, tags=["rounds", "reward"])
    def find(client: Client, wait_s: Annotated[float, Query(ge=0, le=30)] = 0.0,
             include_rounds: Annotated[bool, Query(alias="rounds")] = True) -> Work:
        """What this client has to do: open rounds still waiting for its message (unless
        ``rounds`` is false) and its queued reward queries. ``wait_s`` > 0 holds the request
        until there is something or that time passed (long polling; then empty lists)."""
        found = work.wait_for(
            lambda: find_work(rounds, store, client, include_rounds=include_rounds), wait_s,
            recheck_s=cfg.work_recheck_s)
        return found or Work()

    @app.post("/v1/reward/answers/{query_id}", response_model=None, tags=["reward"],
              status_code=204)
    def answer(client: Client, query_id: Annotated[int, Path(ge=1, le=2**62)],
               body: RewardAnswer) -> None:
        """Pull mode: scores for one query (or the image hashes the client lacks)."""
        row = store.query(query_id)
        if row is None or row["client_id"] != client:
            raise NotFoundError(f"query {query_id} is not pending for this client")
        if row["status"] != "pending":
            raise ConflictError(f"query {query_id} was already answered")
        store.answer_query(query_id, body.scores if not (body.missing or body.error)
                           else body.model_dump(include={"missing", "error"}))

    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory``: settings from ``FEDMOR_SERVER_*`` variables."""
    return create_app(ServerSettings())
