"""HTTP plumbing both apps share: request size limit, typed-error handlers, request auth."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import urllib.parse
from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sdk.wire._auth import (
    BAD_SIGNATURE,
    HEADER_SIGNATURE,
    SERVER_SENDER,
    AuthError,
    SignedRequest,
    parse_public_key,
    signed_by,
    verify_signed,
)
from sdk.wire._limits import Busy, Limiter, send_busy
from sdk.wire._payload import PayloadError, StagePayload
from sdk.wire._roles import RouteTable, refused, route_rule, route_table
from sdk.wire._schemas import StageSubmit

__all__ = [
    "ERROR_RESPONSES",
    "ConflictError",
    "HeaderAuth",
    "NotFoundError",
    "SignatureCheck",
    "SizeLimit",
    "authenticate",
    "docs_ui",
    "header_check",
    "install_errors",
    "signature_check",
    "stage_payload",
]


_log = logging.getLogger("fedmor.auth")
RetiredKeys = Callable[[str], list[str]]  # sender -> the keys it rotated away from


def docs_ui(enabled: bool) -> dict[str, Any]:
    """FastAPI's interactive docs pages (``/docs``, ``/redoc``): off unless ``enabled``, since
    they load JavaScript from a CDN; ``/openapi.json`` is always served."""
    return {} if enabled else {"docs_url": None, "redoc_url": None}


class NotFoundError(LookupError):
    """An unknown round, stage, version or query (HTTP 404)."""


class ConflictError(ValueError):
    """A write contradicts what is already stored (HTTP 409)."""


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/json": {"schema": {
        "type": "object", "properties": {"detail": {"type": "string"}},
        "required": ["detail"]}}}}
    for code, text in [(401, "Not authenticated"), (403, "Forbidden"), (404, "Not found"),
                       (409, "Conflict"), (413, "Request too large"), (422, "Invalid request")]
}
"""The error responses every endpoint documents in OpenAPI (4xx/5xx bodies are ``ErrorBody``)."""


class BodyTooLarge(HTTPException):
    """A request body grew past the size limit while it was read (HTTP 413)."""

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes ({setting})")


class BodyNotSigned(HTTPException):
    """A signed request's body does not hash to the digest its signature covers (HTTP 403; an
    ``HTTPException``, so FastAPI's body parsing passes it on as it is)."""

    def __init__(self) -> None:
        super().__init__(403, BAD_SIGNATURE)


@dataclass(frozen=True)
class HeaderAuth:
    """How an app authenticates a request from its headers alone (``SizeLimit``):
    ``public_key_of`` a sender (None: unknown), this app's own id (``recipient``), the
    ``host:port`` forms it is reached at (``authorities``: a signature names one), the keys an
    identity rotated away from, an admin bearer check (raises ``AuthError``; None: the app
    takes no bearer token), and the paths an anonymous caller may reach (enrollment, probes)."""

    public_key_of: Callable[[str], str | None]
    max_skew_s: float
    authorities: frozenset[str]
    recipient: Callable[[], str] = lambda: SERVER_SENDER
    retired_keys_of: RetiredKeys | None = None
    bearer: Callable[[str], None] | None = None
    cached_key_of: Callable[[str], str | None] | None = None
    """A sender's key if it is at hand without a store read (else None): its signature is
    then checked on the event loop, without a hop to a worker thread."""
    bearer_identity: str = "admin"
    """Whom a valid bearer token counts against (the per-identity caps), and its role."""
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


_CHECK = "fedmor.check"  # the scope key of a request's verified ``SignatureCheck``


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
    async def _answer(send: Send, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

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
            scope[_CHECK] = await self._verified(auth, signed, scope)
            role = signed.sender if auth.role_of is None else auth.role_of(signed.sender)
            return signed.sender, role
        bearer = headers.get(b"authorization")
        if bearer is not None and auth.bearer is not None:
            auth.bearer(bearer.decode("latin-1"))
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
            await self._answer(send, exc.status, str(exc))
            return
        except Busy as exc:  # the sender's caps are full: nothing of its body is read
            assert self.auth is not None and self.auth.limiter is not None
            await send_busy(send, str(exc), self.auth.limiter.cfg.retry_after_s)
            return
        raw_length = headers.get(b"content-length")
        declared = int(raw_length) if raw_length is not None and raw_length.isdigit() else 0
        if declared > limit:
            await self._answer(send, 413, f"request body exceeds {limit} bytes ({setting})")
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
        self.check: SignatureCheck | None = scope.get(_CHECK)
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


def signed_target(scope: Scope) -> str:
    """The path and query a request's signature covers: as they travelled, percent-encoded
    (``raw_path``), so a signer and a verifier agree on one form and an encoded ``?``, ``#``
    or ``/`` cannot make one signed request read as another."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else urllib.parse.quote(scope["path"])
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


def _no_nonce(sender: str, nonce: str, ts: float) -> bool:
    raise AssertionError("the header check records no nonce; the endpoint's check does")


def _error(status: int) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status)
    return handler


async def _auth_error(request: Request, exc: Exception) -> JSONResponse:
    status = exc.status if isinstance(exc, AuthError) else 401
    return JSONResponse({"detail": str(exc)}, status_code=status)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg', '')}"
             for e in errors[:5]]
    return JSONResponse({"detail": "invalid request: " + "; ".join(parts)}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code,
                        headers=exc.headers)


def install_errors(app: FastAPI) -> None:
    """Map typed errors to 4xx answers with a ``detail`` message."""
    app.add_exception_handler(AuthError, _auth_error)
    app.add_exception_handler(PermissionError, _error(403))
    app.add_exception_handler(NotFoundError, _error(404))
    app.add_exception_handler(ConflictError, _error(409))
    app.add_exception_handler(PayloadError, _error(422))
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


class SignatureCheck:
    """The blocking half of a request's authentication (key lookup, signature, nonce): calling
    it returns the sender or raises ``AuthError``. The signature covers the body's declared
    sha256 (``body_sha256``), which ``signature_check`` compared with the body as it streamed
    in: a stage message's stored digest is the same hash of the same bytes."""

    def __init__(self, signed: SignedRequest, *, method: str, path: str,
                 public_key_of: Callable[[str], str | None],
                 use_nonce: Callable[[str, str, float], bool], max_skew_s: float,
                 recipient: str, authorities: Collection[str],
                 retired_keys_of: RetiredKeys | None = None) -> None:
        self._signed, self._method, self._path = signed, method, path
        self._recipient, self._retired_keys_of = recipient, retired_keys_of
        self._authorities = authorities
        self._public_key_of, self._use_nonce, self._max_skew_s = (public_key_of, use_nonce,
                                                                  max_skew_s)
        self.body = b""  # set by ``signature_check`` once read
        self.body_sha256: str = signed.content_sha256
        self._verified = False

    def verify(self) -> None:
        """Check the sender's key, the recipient, the authority, the signature and the clock
        (no body read)."""
        if self._verified:
            return
        signed = self._signed
        key_text = self._public_key_of(signed.sender)
        if key_text is None:
            _log.info("unknown sender %r", signed.sender)
            raise AuthError(BAD_SIGNATURE, status=403)
        try:
            verify_signed(signed, parse_public_key(key_text), method=self._method,
                          path=self._path, body=b"", max_skew_s=self._max_skew_s,
                          body_sha256=self.body_sha256, recipient=self._recipient,
                          authorities=self._authorities)
        except AuthError as exc:
            if str(exc) == BAD_SIGNATURE and self._signed_by_retired_key():
                # Only the old key's holder can get here: telling it so leaks nothing.
                raise AuthError(f"the key that signed this request was rotated out of "
                                f"identity {signed.sender}: sign with its current key") from None
            raise
        self._verified = True

    def bind_nonces(self, use_nonce: Callable[[str, str, float], bool]) -> None:
        """Record nonces with ``use_nonce`` (the endpoint's store) when called."""
        self._use_nonce = use_nonce

    def _signed_by_retired_key(self) -> bool:
        if self._retired_keys_of is None:
            return False
        return any(signed_by(self._signed, parse_public_key(old), method=self._method,
                             path=self._path, body=b"", recipient=self._recipient,
                             body_sha256=self.body_sha256)
                   for old in self._retired_keys_of(self._signed.sender))

    @property
    def sender(self) -> str:
        """The id the request's headers name (its signer, once :meth:`verify` passed)."""
        return self._signed.sender

    def __call__(self) -> str:
        self.verify()
        signed = self._signed
        if not self._use_nonce(signed.sender, signed.nonce, float(signed.timestamp)):
            raise AuthError(f"nonce {signed.nonce} was already used (replayed request)")
        return signed.sender


async def _read_hashed(request: Request, declared_sha256: str) -> bytes:
    """The body, hashed as it streams in (the size limit counts it); ``AuthError`` unless it
    hashes to the signed ``declared_sha256``."""
    digest = hashlib.sha256()
    chunks = []
    async for chunk in request.stream():
        digest.update(chunk)
        chunks.append(chunk)
    if digest.hexdigest() != declared_sha256:
        raise BodyNotSigned()
    return b"".join(chunks)


def _check_of(scope: Scope) -> SignatureCheck | None:
    """The verified check of a request (set once its signed headers checked out)."""
    check = scope.get(_CHECK)
    return check if isinstance(check, SignatureCheck) else None


async def header_check(request: Request, *, public_key_of: Callable[[str], str | None],
                       use_nonce: Callable[[str, str, float], bool],
                       max_skew_s: float, authorities: Collection[str],
                       recipient: str = SERVER_SENDER,
                       retired_keys_of: RetiredKeys | None = None) -> SignatureCheck:
    """``request``'s signed headers, verified once per request: the check ``SizeLimit``
    made (its app gives it a ``HeaderAuth``), else one made here and kept in the request's
    scope, so every later layer reads its sender without another verification. No body byte
    is read; ``use_nonce`` records the nonce when the check is called."""
    check = _check_of(request.scope)
    if check is None:
        check = SignatureCheck(SignedRequest.from_headers(dict(request.headers)),
                               method=request.method, path=signed_target(request.scope),
                               public_key_of=public_key_of, use_nonce=use_nonce,
                               max_skew_s=max_skew_s, recipient=recipient,
                               authorities=authorities, retired_keys_of=retired_keys_of)
        await run_in_threadpool(check.verify)
        request.scope[_CHECK] = check
    check.bind_nonces(use_nonce)
    return check


async def signature_check(request: Request, *, public_key_of: Callable[[str], str | None],
                          use_nonce: Callable[[str, str, float], bool],
                          max_skew_s: float, authorities: Collection[str],
                          recipient: str = SERVER_SENDER,
                          retired_keys_of: RetiredKeys | None = None) -> SignatureCheck:
    """Read ``request``'s auth headers and body (``check.body``); returns the blocking check
    (``recipient``: this app's own id). The body is read only after its headers passed
    :func:`header_check`; it is hashed as it streams in (by ``SizeLimit`` when the app gives
    it a ``HeaderAuth``, else here). An endpoint that does blocking work anyway runs the
    check first in the same worker thread: one thread hop. ``retired_keys_of`` names the keys
    an identity rotated away from: a request one of them signed gets 401 saying so."""
    hashed = _check_of(request.scope) is not None  # ``SizeLimit`` hashes the body it passes
    check = await header_check(request, public_key_of=public_key_of, use_nonce=use_nonce,
                               max_skew_s=max_skew_s, recipient=recipient,
                               authorities=authorities, retired_keys_of=retired_keys_of)
    check.body = (await request.body() if hashed
                  else await _read_hashed(request, check.body_sha256))
    return check


async def authenticate(request: Request, *, public_key_of: Callable[[str], str | None],
                       use_nonce: Callable[[str, str, float], bool], max_skew_s: float,
                       authorities: Collection[str],
                       retired_keys_of: RetiredKeys | None = None) -> str:
    """Verify the signed headers of ``request``; returns the sender. Raises ``AuthError``."""
    check = await signature_check(request, public_key_of=public_key_of, use_nonce=use_nonce,
                                  max_skew_s=max_skew_s, authorities=authorities,
                                  retired_keys_of=retired_keys_of)
    # Off the event loop: the store lookups may wait behind a large durable write.
    return await run_in_threadpool(check)


def stage_payload(content_type: str, body: bytes) -> StagePayload:
    """A stage submission's payload, parsed once from the raw body: the bytes themselves for
    ``application/octet-stream``, else the ``payload`` of a JSON ``StageSubmit``."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/octet-stream":
        if not body:
            raise PayloadError("empty application/octet-stream body")
        return body
    if media not in ("application/json", ""):
        raise StarletteHTTPException(415, f"content type {media!r} is not accepted: use "
                                          "application/json or application/octet-stream")
    try:
        return StageSubmit.model_validate_json(body).payload
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None
