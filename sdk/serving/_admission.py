"""The header check before the body: each request authenticated and authorized from its
headers alone, then its body bounded, hashed and timed as the endpoint reads it. Who may call a
route is declared once where the route is defined (``for_roles``), and the check reads it from
the app's route table before a byte of the body."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, ClassVar

import fastapi.routing
from fastapi import HTTPException
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sdk.serving._errors import send_error
from sdk.serving._limits import Limiter, RateLimited
from sdk.serving._request import CHECK, BodyNotSigned, RetiredKeys, SignatureCheck, signed_target
from sdk.wire import HEADER_SIGNATURE, SERVER_SENDER, AuthError
from sdk.wire._auth import SignedRequest

__all__ = ["HeaderAuth", "SizeLimit", "check_bearer", "for_roles"]

_log = logging.getLogger("fedmor.auth")


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


class BodyTooLarge(HTTPException):
    """A request body grew past the size limit while it was read (HTTP 413)."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes ({setting})")


@dataclass(frozen=True)
class HeaderAuth:
    """How an app authenticates a request from its headers alone (``SizeLimit``):
    ``public_key_of`` a sender (None: unknown), this app's own id (``recipient``), the
    ``host:port`` forms it is reached at (``authorities``: a signature names one), the keys an
    identity rotated away from, the admin bearer token (``bearer_identity`` None: the app
    takes none), and the paths an anonymous caller may reach (enrollment, probes)."""

    public_key_of: Callable[[str], str | None]
    max_skew_s: float
    authorities: frozenset[str]
    recipient: Callable[[], str] = lambda: SERVER_SENDER
    retired_keys_of: RetiredKeys | None = None
    admin_token: SecretStr | None = None
    """The admin bearer token (None: admin endpoints are off, a bearer gets 403)."""
    cached_key_of: Callable[[str], str | None] | None = None
    """A sender's key if it is at hand without a store read (else None): its signature is
    then checked on the event loop, without a hop to a worker thread."""
    bearer_identity: str | None = None
    """Whom a valid bearer token counts against (the per-identity caps), and its role; None:
    the app takes no bearer token."""
    role_of: Callable[[str], str] | None = None
    """A verified sender's role, read before the body (raises ``AuthError`` for one that may
    call nothing, such as a revoked identity); None: each sender is its own role."""
    limiter: Limiter | None = None
    """The per-identity caps: a request counts against its sender once its headers check out
    (before any body byte); None: no caps."""
    anonymous_paths: frozenset[str] = frozenset()
    anonymous_prefixes: tuple[str, ...] = ()
    """Path prefixes an anonymous caller may reach too: pages that authenticate by their own
    means (the operator console's session cookie)."""

    PROBES: ClassVar[frozenset[str]] = frozenset({
        "/v1/health", "/v1/ready", "/metrics", "/openapi.json", "/docs", "/redoc",
        "/docs/oauth2-redirect"})
    """The paths every app serves to anyone (liveness, readiness, metrics, API schema)."""


class SizeLimit:
    """ASGI middleware: authenticate and authorize each request from its headers before a
    byte of its body is read (``auth``), then bound the body. The request's method and path
    give its route, and the route's :func:`for_roles` declaration the roles that may call it;
    the signature headers (sender, recipient, method, path, clock, declared body hash) or the
    admin bearer token give the caller and its role. A caller that does not check out (401/403)
    or whose role the route refuses (403) is answered without reading its body; an accepted
    signed body is hashed as it streams in (403 unless it is the signed one). An accepted
    caller may send the route's own limit: ``limit`` for an upload route, ``control_limit``
    for any other; an anonymous request, only ``unsigned_limit`` and only to
    ``auth.anonymous_paths``. Nothing is buffered here: a declared length over the limit is
    refused at once (413), a body is counted as the endpoint reads it, and a caller that hangs
    up mid-body costs one log line. With ``body_timeout_s``, a body not complete that long
    after the request started is refused 408 and its connection closed."""

    def __init__(self, app: ASGIApp, *, limit: int, control_limit: int | None = None,
                 unsigned_limit: int = 2**20, auth: HeaderAuth | None = None,
                 body_timeout_s: float | None = None) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.limit = limit
        self.control_limit = limit if control_limit is None else min(control_limit, limit)
        self.unsigned_limit = min(unsigned_limit, limit)
        self.auth = auth
        self._routes: RouteTable | None = None

    @staticmethod
    async def _verified(auth: HeaderAuth, signed: SignedRequest, scope: Scope
                        ) -> SignatureCheck:
        """``signed`` verified: on the event loop when its sender's key is cached (one
        Ed25519 check costs the loop less than a hop to a worker thread), else in a worker
        thread (a store read), as is any failed check (its message may read the store)."""
        kw: dict[str, Any] = {"method": scope["method"], "path": signed_target(scope),
                              "use_nonce": _no_nonce, "max_skew_s": auth.max_skew_s,
                              "recipient": auth.recipient(), "authorities": auth.authorities}
        key = None if auth.cached_key_of is None else auth.cached_key_of(signed.sender)
        if key is not None:
            check = SignatureCheck(signed, public_key_of=lambda sender: key, **kw)
            with suppress(AuthError):
                check.verify()
                return check
        check = SignatureCheck(signed, public_key_of=auth.public_key_of,
                               retired_keys_of=auth.retired_keys_of, **kw)
        await run_in_threadpool(check.verify)
        return check

    async def _identify(self, scope: Scope, headers: dict[bytes, bytes]
                        ) -> tuple[str, str] | None:
        """The caller's id and role from the headers alone (None: anonymous); raises
        ``AuthError`` for a signature or bearer token that does not check out."""
        auth = self.auth
        assert auth is not None
        if HEADER_SIGNATURE.encode() in headers:
            signed = SignedRequest.from_headers(
                {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()})
            scope[CHECK] = await self._verified(auth, signed, scope)
            role = signed.sender if auth.role_of is None else auth.role_of(signed.sender)
            return signed.sender, role
        if b"authorization" in headers and auth.bearer_identity is not None:
            check_bearer(scope, auth.admin_token)
            return auth.bearer_identity, auth.bearer_identity
        return None

    async def _authorize(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[int, str]:
        """The body limit (and its setting) this request may send to the route its method and
        path match: known from the headers and the route's declared roles alone, so a caller
        the route refuses gets ``AuthError`` (403) before any body byte is read."""
        auth = self.auth
        if auth is None:  # no header auth configured: the old rule (tests of bare apps)
            if HEADER_SIGNATURE.encode() in headers:
                return self.limit, "max_request_bytes"
            return self.unsigned_limit, "unsigned body limit"
        if self._routes is None:  # the app's routes are all added before its first request
            self._routes = route_table(scope.get("app"))
        rule = route_rule(self._routes, scope)
        path = scope["path"]
        anonymous = path in auth.anonymous_paths or path.startswith(auth.anonymous_prefixes)
        caller = await self._identify(scope, headers)
        if caller is None:
            if not anonymous:
                SignedRequest.from_headers({})  # raises: which headers are missing
            return self.unsigned_limit, "unsigned body limit"
        sender, role = caller
        if rule is not None and not anonymous and (rule.roles is None or role not in rule.roles):
            raise refused(scope, rule.roles or frozenset(), sender, role,
                           bearer=HEADER_SIGNATURE.encode() not in headers)
        if auth.limiter is not None:
            auth.limiter.admit(scope, sender)
        if rule is not None and rule.upload:
            return self.limit, "max_request_bytes"
        return self.control_limit, "max_control_bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        try:
            limit, setting = await self._authorize(scope, headers)
        except AuthError as exc:
            await send_error(send, exc.status, str(exc))
            return
        except RateLimited as exc:  # the sender's caps are full: nothing of its body is read
            await send_error(send, 429, str(exc), retry_after_s=exc.retry_after_s)
            return
        raw_length = headers.get(b"content-length")
        declared = int(raw_length) if raw_length is not None and raw_length.isdigit() else 0
        if declared > limit:
            await send_error(send, 413, f"request body exceeds {limit} bytes ({setting})")
            return
        body = _Body(self, scope, receive, limit=(limit, setting))
        with suppress(ClientDisconnect):  # logged as it happened; nobody is left to answer
            await self.app(scope, body.receive, send)


class BodyTimeout(HTTPException):
    """A request's body did not arrive within the body deadline (HTTP 408; the connection is
    closed after the answer)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(408, f"the request body did not arrive within {timeout_s:g} s "
                              "(connections.body_timeout_s)", headers={"connection": "close"})


class _Body:
    """One request's body as the app reads it: bounded by the limit ``SizeLimit`` found for
    its route and caller, hashed against the signed digest, and due whole within the body
    deadline from the request's start (a client that trickles it holds nothing longer)."""

    def __init__(self, owner: SizeLimit, scope: Scope, receive: Receive, *,
                 limit: tuple[int, str]) -> None:
        self.owner, self.scope, self._receive = owner, scope, receive
        self.limit, self.setting = limit
        self.size = 0
        self.check: SignatureCheck | None = scope.get(CHECK)
        self.digest = hashlib.sha256()
        self.done = False
        self.deadline = (None if owner.body_timeout_s is None
                         else asyncio.get_running_loop().time() + owner.body_timeout_s)

    async def _next(self) -> Message:
        if self.done or self.deadline is None:  # after the body: a disconnect, never late
            return await self._receive()
        left = self.deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(self._receive(), max(left, 0.0))
        except TimeoutError:
            _log.info("%s %s: no complete body within %g s (%d bytes came)",
                      self.scope["method"], self.scope["path"], self.owner.body_timeout_s,
                      self.size)
            raise BodyTimeout(self.owner.body_timeout_s or 0.0) from None

    async def receive(self) -> Message:  # chunked uploads are bounded too
        message = await self._next()
        if message["type"] == "http.disconnect":  # one line, whoever turns it into what
            _log.info("%s %s: the caller hung up after %d body bytes", self.scope["method"],
                      self.scope["path"], self.size)
            return message
        chunk = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self.limit:
            raise BodyTooLarge(self.limit, self.setting)
        self.done = not message.get("more_body")
        if self.check is not None:
            self.digest.update(chunk)
            if self.done and self.digest.hexdigest() != self.check.body_sha256:
                raise BodyNotSigned()
        return message


_BEARER = "fedmor.bearer"  # the scope key set once a request's admin bearer token checked out


def check_bearer(scope: Scope, token: SecretStr | None) -> None:
    """The one admin-token check: accept only a request whose ``authorization`` header is
    ``Bearer <token>``, compared in constant time once per request (the header check's verdict
    is kept in the request's scope, so the route's own check reads it); ``AuthError``
    otherwise, 403 when no token is configured."""
    if scope.get(_BEARER):
        return
    if token is None:
        raise AuthError("admin endpoints are disabled (no admin_token configured)", status=403)
    header = dict(scope["headers"]).get(b"authorization", b"")
    if not hmac.compare_digest(header, f"Bearer {token.get_secret_value()}".encode()):
        raise AuthError("missing or wrong admin bearer token")
    scope[_BEARER] = True


def _no_nonce(sender: str, nonce: str, ts: float) -> bool:
    raise AssertionError("the header check records no nonce; the endpoint's check does")


