"""The auditor role's endpoints (an ``APIRouter`` that ``create_app`` includes).

- ``GET /v1/captures``: the capture directory's manifest; ``GET /v1/captures/files/{path}``:
  one file it names (or the manifest, or the reward-query log), byte for byte. For a signed
  ``auditor`` identity or the admin token; 404 while capture mode is off.
- ``POST /v1/audit/members/{name}/reward``: a membership query relayed to one member through
  the reward broker, exactly as the aligner's queries reach it. The member sees the server as
  the caller, so its site policy's ``reward_budget`` bounds every server-relayed query
  together; the server adds a budget per auditor (``audit.query_budget`` items per
  ``audit.window_s``, HTTP 429 past it); ``GET /v1/audit/budget`` (server_app._routes._audit_budget)
  says what is left of it. A member's own 429 reaches the auditor as the server's 429 with the
  member's ``Retry-After``; any other refusal, and a member that cannot be reached, is 502.

An auditor may not open rounds, send stage messages or ask for rewards (``/v1/rewards``): those
endpoints check their own roles and refuse it (403).
"""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` aliases.

import hashlib
import math
import threading
import time
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException
from fastapi import Path as PathParam
from fastapi.responses import FileResponse

from sdk.capture import CaptureManifest
from sdk.serving import NotFoundError, RateLimited, for_roles
from sdk.wire import ImageRef, PayloadError, RequestRefused, RewardRequest, RewardResponse
from server_app._capture import ServerCapture
from server_app._identity._access import ADMIN, Access
from server_app._rewards._broker import BrokerError, RewardBroker
from server_app._settings import ServerSettings
from server_app._settings._audit import AuditSettings
from server_app._store import Store

__all__ = ["audit_router", "install_audit"]


class _Budget:
    """Items each auditor had scored in the sliding window, kept in the store (a restart
    forgets nothing; the member's own budget, kept in its store, holds as well)."""

    def __init__(self, store: Store, cfg: AuditSettings) -> None:
        self.store, self.cfg = store, cfg
        self._lock = threading.Lock()  # one check-and-charge at a time

    def charge(self, auditor: str, n: int) -> None:
        with self._lock:
            total = self.store.auditor_items(auditor, time.time() - self.cfg.window_s)
            if total + n > self.cfg.query_budget:
                raise RateLimited(f"auditor {auditor} has used {total} of its "
                                  f"{self.cfg.query_budget} scored items in the last "
                                  f"{self.cfg.window_s:g} s; {n} more would exceed them")
            self.store.charge_auditor(auditor, n)


def _images(store: Store, req: RewardRequest) -> list[ImageRef]:
    """The query's images (sent now and checked against their hash, or kept from an earlier
    query)."""
    sent = {i.image_sha256: ImageRef.sent(i.image_sha256, i.image_b64)
            for i in req.items if i.image_b64 is not None}
    for digest in {i.image_sha256 for i in req.items} - set(sent):
        data = store.image(digest)
        if data is not None:  # the store keeps only bytes the broker checked
            sent[digest] = ImageRef(digest, data)
    missing = sorted({i.image_sha256 for i in req.items} - set(sent))
    if missing:
        raise PayloadError(f"the server does not hold image(s) {missing}: send their bytes in "
                           "image_b64")
    return [sent[i.image_sha256] for i in req.items]


def audit_router(store: Store, capture: ServerCapture | None, broker: RewardBroker,
                 access: Access, cfg: AuditSettings) -> APIRouter:
    """The capture and membership-query endpoints."""
    router = APIRouter(tags=["audit"])
    budget = _Budget(store, cfg)

    Caller = Annotated[str, Depends(access.caller_id)]

    def opened() -> ServerCapture:
        if capture is None:
            raise NotFoundError("capture mode is off on this server (capture.enabled)")
        return capture

    @router.get("/v1/captures", response_model=CaptureManifest,
                openapi_extra=for_roles("auditor", ADMIN))
    def manifest(_: Caller) -> CaptureManifest:
        """The capture directory's manifest: every captured round, its artefacts (with their
        sha256) and the number of logged reward queries."""
        return opened().manifest()

    @router.get("/v1/captures/files/{path:path}", response_class=FileResponse,
                responses={200: {"content": {"application/octet-stream": {}}}},
                openapi_extra=for_roles("auditor", ADMIN))
    def capture_file(_: Caller, path: str) -> FileResponse:
        """One file of the capture, as the manifest names it (``manifest.json`` and the
        reward-query log too); anything else is 404."""
        cap = opened()
        found = cap.manifest()
        allowed = {"manifest.json", *( [found.reward_queries] if found.reward_queries else []),
                   *(a.file for r in found.rounds for a in r.artefacts)}
        if path not in allowed:
            raise NotFoundError(f"{path!r} is not a file of the capture")
        return FileResponse(cap.cfg.dir / path, media_type="application/octet-stream")

    @router.post("/v1/audit/members/{name}/reward", response_model=RewardResponse,
                 responses={429: {"description": "this auditor's query budget is spent, or "
                                  "the member is rate-limiting the server (its Retry-After)"},
                            502: {"description": "the member refused or did not answer"}},
                 openapi_extra=for_roles("auditor", upload=True))
    async def member_reward(who: Caller, req: RewardRequest,
                            name: Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
                            ) -> RewardResponse:
        """Scores of ``items`` from member ``name``, relayed through the reward broker (the
        member's site policy and budget apply to the server as its caller); charged to this
        auditor's budget before the member is asked."""
        member = next((m for m in store.clients("member") if m.name == name), None)
        if member is None:
            raise NotFoundError(f"no enrolled member is named {name!r}")
        images = _images(store, req)
        budget.charge(who, len(images))
        try:
            scores = await broker.query(member.client_id, images,
                                        [i.prompt for i in req.items],
                                        [i.response for i in req.items])
        except (BrokerError, RequestRefused) as exc:
            if isinstance(exc, RequestRefused) and exc.status == 429:
                # The member is busy, not a bad gateway: its wait is passed on.
                raise RateLimited(f"member {name} is rate-limiting the server's queries: "
                                  f"{exc.reason}", retry_after_s=math.ceil(exc.wait_s)) from exc
            # An unreachable member is the broker's one text, whatever did or did not answer.
            raise HTTPException(502, f"member {name} did not score the query: {exc}") from exc
        store.audit(who, "audit_query", member=name, items=len(images))
        digest = hashlib.sha256(req.model_dump_json().encode()).hexdigest()
        return RewardResponse(scores=scores, query_sha256=digest)

    return router


def install_audit(app: FastAPI, store: Store, capture: ServerCapture | None,
                  broker: RewardBroker, access: Access, cfg: ServerSettings) -> None:
    """The auditor's endpoints over ``capture`` (None: capture mode off; the round manager and
    the broker were handed it when they were built)."""
    app.state.capture = capture
    app.include_router(audit_router(store, capture, broker, access, cfg.audit))
