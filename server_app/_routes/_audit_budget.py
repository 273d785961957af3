"""``GET /v1/audit/budget``: what is left of an auditor's membership-query budget, so an audit
(``fedmor audit --server``) is sized to fit before it asks any member anything. The budget
itself (``audit.query_budget`` scored items per ``audit.window_s``) is charged by
``POST /v1/audit/members/{name}/reward`` (server_app._routes._audit) and kept in the store."""

# No ``from __future__ import annotations``: FastAPI reads the local ``Annotated`` alias.

import time
from typing import Annotated

from fastapi import APIRouter, Depends

from sdk.serving import for_roles
from sdk.wire import AuditBudget
from server_app._identity._access import Access
from server_app._settings._audit import AuditSettings
from server_app._store import Store

__all__ = ["audit_budget_router"]


def audit_budget_router(store: Store, access: Access, cfg: AuditSettings) -> APIRouter:
    """The budget endpoint, for signed ``auditor`` identities only."""
    router = APIRouter(tags=["audit"])

    @router.get("/v1/audit/budget", response_model=AuditBudget,
                openapi_extra=for_roles("auditor"))
    def budget_left(who: Annotated[str, Depends(access.caller_id)]) -> AuditBudget:
        """This auditor's query budget: items used in the current window and left."""
        used = store.auditor_items(who, time.time() - cfg.window_s)
        return AuditBudget(auditor=who, budget=cfg.query_budget, used=used,
                           left=max(0, cfg.query_budget - used), window_s=cfg.window_s)

    return router
