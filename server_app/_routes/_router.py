"""Router versions and configuration: the newest version's metadata, one version's parameters,
the initial publication, the rollback, the consortium's router configuration and the
operator's command that starts a new lineage (an ``APIRouter`` that ``create_app`` includes)."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Path, Query, Request, Response

from sdk.serving import NotFoundError, for_roles
from sdk.wire import (
    ConsortiumRouterConfig,
    PayloadError,
    RouterConfigInfo,
    RouterRollback,
    RouterVersionInfo,
)
from server_app._identity._access import ADMIN, ANY_ROLE, Access, Identity
from server_app._router._config import RouterLineages
from server_app._store import ConflictError, Store, VersionMeta

__all__ = ["router_versions", "router_versions_router"]

_BINARY_BODY = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}
_BLOB_RESPONSE: dict[int | str, dict[str, Any]] = {200: {
    "content": {"application/octet-stream": {}},
    "description": "little-endian float32 router parameters"}}


def _initial_router(body: bytes) -> np.ndarray:
    """Parse a published router: whole little-endian float32 values, all finite."""
    if not body or len(body) % 4:
        raise PayloadError(f"a router is whole float32 values; got {len(body)} bytes")
    vector = np.frombuffer(body, dtype="<f4")
    if not np.isfinite(vector).all():
        raise PayloadError("the router holds non-finite values")
    return vector


def _none_yet(lineages: RouterLineages) -> str:
    """What ``latest`` says while the current lineage has no version: and where the newest
    earlier one is (the one the reward service serves meanwhile)."""
    current = lineages.current()
    if current is None:
        return "no router version exists yet"
    older = [(lineage, versions) for lineage, versions in
             lineages.store.lineage_versions().items() if lineage < current.lineage]
    if not older:
        return f"no router version yet: none yet in lineage {current.lineage}"
    lineage, (_, latest) = max(older)
    return (f"no router version yet: none yet in lineage {current.lineage} (lineage "
            f"{lineage} latest v{latest})")


def _info_of(lineages: RouterLineages, row: VersionMeta) -> RouterVersionInfo:
    return RouterVersionInfo(version=row.version, round_id=row.round_id, sha256=row.sha256,
                             size_bytes=row.size_bytes, length=row.length,
                             created_at=row.created_at, router_config=lineages.ref(row.lineage),
                             restored=row.restored, carried_from=row.carried_from)


def _version_info(lineages: RouterLineages, version: int | None = None) -> RouterVersionInfo:
    """The metadata of ``version`` (the newest of the current lineage when None);
    NotFoundError if there is none."""
    row = lineages.store.version(version)
    if row is None:
        raise NotFoundError(_none_yet(lineages) if version is None
                            else f"router version {version} does not exist")
    return _info_of(lineages, row)


def router_versions(lineages: RouterLineages) -> list[RouterVersionInfo]:
    """Every router version's metadata with its lineage and origin, oldest first (``GET
    /v1/router/versions``; a rollback is a new version)."""
    return [_info_of(lineages, r) for r in lineages.store.versions()]


def _check_current(lineages: RouterLineages, row: VersionMeta | None, length: int) -> None:
    """Refuse publishing a router that does not follow the current configuration: a version
    of another lineage (``row``, the version published again, 409) or another length
    (422)."""
    current = lineages.current()
    if current is None:
        return
    if row is not None and row.lineage != current.lineage:
        raise ConflictError(f"router version {row.version} belongs to lineage "
                            f"{row.lineage}, rounds now follow lineage {current.lineage}")
    if length != current.num_params:
        raise PayloadError(f"the router has {length} parameters; the consortium's "
                           f"{current.config.describe()} (lineage {current.lineage}) gives "
                           f"{current.num_params}")


def _publish_first(lineages: RouterLineages, actor: str, vector: np.ndarray) -> RouterVersionInfo:
    """Store ``vector`` as the first router version (409 once any exists), audited."""
    store = lineages.store
    if store.version() is not None:
        raise ConflictError("a router version exists already; rounds build on it")
    _check_current(lineages, None, int(vector.shape[0]))
    current = lineages.current()
    version = store.add_version(None, vector.tobytes(), int(vector.shape[0]),
                                None if current is None else current.lineage)
    store.audit(actor, "router_published", version=version)
    return _version_info(lineages, version)


def _roll_back(lineages: RouterLineages, actor: str, restored: int) -> RouterVersionInfo:
    """Publish version ``restored`` again as the newest, with its audit row in one
    transaction; 404 for a version that does not exist."""
    store = lineages.store
    row = store.version(restored)
    if row is None:
        raise NotFoundError(f"router version {restored} does not exist")
    _check_current(lineages, row, row.length)
    with store.transaction():
        version = store.add_version(None, row.blob, row.length, row.lineage, restored=restored)
        store.audit(actor, "router_rolled_back", restored=restored, version=version)
    return _version_info(lineages, version)


def router_versions_router(store: Store, access: Access, lineages: RouterLineages) -> APIRouter:
    """The ``/v1/router`` endpoints over ``store``: any signed caller reads, the operator role
    (or the admin token) publishes the first version, rolls back and starts a lineage."""
    router = APIRouter(prefix="/v1/router", tags=["router"])
    Caller = Annotated[Identity, Depends(access.caller)]
    everyone = for_roles(*ANY_ROLE)
    operators = for_roles("operator", ADMIN)

    @router.get("/config", response_model=RouterConfigInfo, openapi_extra=everyone)
    def router_config(_: Caller, lineage: Annotated[int | None, Query(ge=1, le=2**62)] = None
                      ) -> RouterConfigInfo:
        """The consortium's router configuration (encoder, router, head order, schedule), its
        sha256 and parameter count: of the current lineage, or of ``lineage``. Members train
        on it after recomputing its hash and comparing it with the round's."""
        return lineages.get(lineage)

    @router.get("/lineages", response_model=list[RouterConfigInfo], openapi_extra=everyone)
    def router_lineages(_: Caller) -> list[RouterConfigInfo]:
        """Every router lineage with its first and latest version, oldest first (the last is
        current)."""
        return lineages.history()

    @router.post("/lineage", response_model=RouterConfigInfo, openapi_extra=operators)
    def router_lineage(caller: Caller, config: ConsortiumRouterConfig) -> RouterConfigInfo:
        """Start a new router lineage on ``config`` (operator or admin; audited): rounds open
        on it from now on. With the same encoder and trunk its first version carries the
        current router over (trunk and kept heads as they are, a new head zero); no version
        is deleted. Declare the same configuration in the server's ``[router]`` before its
        next restart."""
        return lineages.start(config, caller.caller_id)

    @router.get("/latest", response_model=RouterVersionInfo, openapi_extra=everyone)
    def router_latest(_: Caller) -> RouterVersionInfo:
        """Metadata and sha256 of the newest global router."""
        return _version_info(lineages)

    @router.get("/versions", response_model=list[RouterVersionInfo], openapi_extra=everyone)
    def list_versions(_: Caller) -> list[RouterVersionInfo]:
        """Every router version's metadata, oldest first (versions only grow)."""
        return router_versions(lineages)

    @router.post("", response_model=RouterVersionInfo, openapi_extra=for_roles(
        "operator", ADMIN, upload=True, openapi_extra=_BINARY_BODY))
    async def router_initial(request: Request) -> RouterVersionInfo:
        """Publish the federation's starting router (operator or admin): little-endian
        float32 parameters, accepted only while no version exists. Rounds then sum deltas
        from it, which one fixed-point clip range holds."""
        caller, body = await access.caller_with_body(request)
        return _publish_first(lineages, caller.caller_id, _initial_router(body))

    @router.get("/{version}", response_class=Response, responses=_BLOB_RESPONSE,
                openapi_extra=everyone)
    def router_blob(_: Caller, version: Annotated[int, Path(ge=1, le=2**62)]) -> Response:
        """The parameters of one router version; header ``x-fedmor-sha256`` is their hash."""
        row = store.version(version)
        if row is None:
            raise NotFoundError(f"router version {version} does not exist")
        return Response(row.blob, media_type="application/octet-stream",
                        headers={"x-fedmor-sha256": row.sha256})

    @router.post("/rollback", response_model=RouterVersionInfo, openapi_extra=operators)
    def router_rollback(caller: Caller, req: RouterRollback) -> RouterVersionInfo:
        """Publish an earlier router version again as the newest (operator or admin):
        members fetch it as ``latest`` and the next round starts from it. Nothing is deleted;
        versions only grow."""
        return _roll_back(lineages, caller.caller_id, req.version)

    return router
