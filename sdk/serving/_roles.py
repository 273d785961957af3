"""Who may call a route, declared once where the route is defined (``for_roles``), and the
table the header check reads it from before a byte of the body."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from starlette.routing import compile_path
from starlette.types import Scope

from sdk.wire import AuthError

__all__ = ["RouteTable", "for_roles", "refused", "route_rule", "route_table"]


_BODY_KIND = "x-fedmor-body"  # in a route's openapi_extra: "upload" lifts its body limit
_ROLES = "x-fedmor-roles"  # in a route's openapi_extra: the roles that may call it


def for_roles(*roles: str, upload: bool = False,
              openapi_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``openapi_extra`` that declares who may call a route: the roles a signed (or
    bearer) caller must have, checked by ``SizeLimit`` from the headers before a byte of the
    body is read, and whether its body may reach the app's ``max_request_bytes`` (``upload``:
    stage messages, router blobs, image batches) rather than ``max_control_bytes`` (control
    messages are small JSON). The declaration is the route's one list of roles."""
    if not roles:
        raise ValueError("a route declares at least one role")
    extra = {**(openapi_extra or {}), _ROLES: list(roles)}
    return {**extra, _BODY_KIND: "upload"} if upload else extra


@dataclass(frozen=True)
class _RouteRule:
    """What the route a request matched declared: its roles (None: it declared none, so only
    an anonymous path serves it) and whether it takes uploads."""

    roles: frozenset[str] | None
    upload: bool


def refused(scope: Scope, roles: frozenset[str], sender: str, role: str, *,
             bearer: bool) -> AuthError:
    """The 403 of a caller whose role the route does not declare, naming the roles it does."""
    allowed = " or ".join(sorted(roles)) or "no"
    where = f"{scope['method']} {scope['path']}"
    if bearer:
        return AuthError(f"{where} is for a signed {allowed} identity (the {allowed} role), "
                         "not the admin bearer token", status=403)
    return AuthError(f"{where} is for the {allowed} role; caller {sender!r} has role "
                     f"{role!r}", status=403)


RouteTable = list[tuple[re.Pattern[str], frozenset[str], _RouteRule]]


def route_table(app: Any) -> RouteTable:
    """Each route of ``app`` (with its routers' prefixes) as its path pattern, its methods and
    its declaration, in the order the app's router tries them."""
    routes = getattr(getattr(app, "router", None), "routes", [])
    contexts = (fastapi.routing.iter_route_contexts(routes)
                if hasattr(fastapi.routing, "iter_route_contexts") else routes)
    table: RouteTable = []
    for route in contexts:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if not isinstance(path, str) or not methods:
            continue
        extra = getattr(route, "openapi_extra", None) or {}
        roles = extra.get(_ROLES)
        rule = _RouteRule(None if roles is None else frozenset(roles),
                          extra.get(_BODY_KIND) == "upload")
        table.append((compile_path(path)[0], frozenset(methods), rule))
    return table


def route_rule(table: RouteTable, scope: Scope) -> _RouteRule | None:
    """The declaration of the route ``scope``'s method and path match (None: no route), found
    before the body, as the app's router will match it."""
    path, method = scope["path"], scope["method"]
    for pattern, methods, rule in table:
        if method in methods and pattern.match(path):
            return rule
    return None
