"""The one signed HTTP client every fedmor caller uses: :class:`SignedClient` (sync) and
:class:`AsyncSignedClient` (async).

Signing is one ``httpx.Auth`` flow (:class:`SignedAuth`), which httpx drives from its sync and
async clients alike; building a request and reading an answer are shared functions, so the two
clients differ only in ``await`` and neither holds a copy of the signing or error rules. Each
attempt is signed afresh (new nonce and timestamp), so a retry is never taken for a replay.

Every answer other than 2xx, to any fedmor caller (an app, the command line, the aligner, the
broker), is one :class:`RequestRefused` with its status, reason and ``Retry-After``; an answer
is read into the schema the caller names (``get(path, RoundInfo) -> RoundInfo``).
"""

from __future__ import annotations

import contextlib
import email.utils
import enum
import json
import math
import ssl
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any, Generic, TypeVar, overload
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, TypeAdapter

from sdk.wire._auth import SERVER_SENDER, authority_of, sign_headers
from sdk.wire._dial import checked_transport
from sdk.wire._tls import tls_verify

__all__ = ["AsyncSignedClient", "RequestRefused", "SignedAuth", "SignedClient"]

T = TypeVar("T")
_H = TypeVar("_H", httpx.Client, httpx.AsyncClient)


class _Use(enum.Enum):
    CLIENT_AUTH = "the client's own signer"


_AuthArg = httpx.Auth | None | _Use
_REASON_CHARS = 300  # of a refusal's body kept in the error: enough for any server message
# A Retry-After of 0 must not turn into a busy loop of resends; a retryable refusal without one
# (or with one that cannot be read) is sent again after the default.
_RETRY_FLOOR_S = 0.1
_RETRY_DEFAULT_S = 1.0
_MAX_ANSWER_BYTES = 64 * 2**20  # a client's default bound on one answer's body


def _retry_after(header: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date; a date
    in the past asks for 0); None when there is none or it cannot be read."""
    if not header:
        return None
    try:
        wait = float(header)
    except ValueError:
        try:
            wait = email.utils.parsedate_to_datetime(header).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(wait, 0.0) if math.isfinite(wait) else None


class RequestRefused(RuntimeError):
    """The other side answered a request with a status other than 2xx.

    ``status``; ``reason``: its message (the JSON ``detail``, else the body's start, at most
    300 characters); ``retry_after``: the seconds its ``Retry-After`` asks for (None without
    one); ``method`` and ``path``: the request's. The message names the request (or ``what``,
    the task it served) and who refused it (``by``).
    """

    def __init__(self, method: str, path: str, status: int, reason: str, *,
                 retry_after: float | None = None, by: str = "the server",
                 what: str | None = None) -> None:
        self.method, self.path, self.status, self.reason = method, path, status, reason
        self.retry_after, self.by = retry_after, by
        after = "" if retry_after is None else f"; retry after {retry_after:g} s"
        super().__init__(f"{what or f'{method} {path}'} refused by {by} ({status}): "
                         f"{reason}{after}")

    @property
    def wait_s(self) -> float:
        """How long to wait before sending it again: the ``Retry-After``, never below a
        floor, or a default without one."""
        return _RETRY_DEFAULT_S if self.retry_after is None \
            else max(self.retry_after, _RETRY_FLOOR_S)

    @classmethod
    def of(cls, response: httpx.Response, *, by: str = "the server",
           what: str | None = None) -> RequestRefused:
        """The refusal ``response`` carries (see the class for ``by`` and ``what``)."""
        try:
            reason = response.json().get("detail", response.text)
        except (ValueError, AttributeError):
            reason = response.text
        request = response.request
        return cls(request.method, request.url.path, response.status_code,
                   str(reason)[:_REASON_CHARS],
                   retry_after=_retry_after(response.headers.get("retry-after")), by=by,
                   what=what)


class SignedAuth(httpx.Auth):
    """Signs every request with an Ed25519 identity key (``sender``: the signer's id) for
    ``recipient``; ``root`` is the URL path the receiving app is mounted under, which the
    signature leaves out (the app sees the paths below it)."""

    requires_request_body = True  # the signature covers the body's sha256

    def __init__(self, key: Ed25519PrivateKey, sender: str, *, recipient: str = SERVER_SENDER,
                 root: str = "") -> None:
        self.key, self.sender, self.recipient = key, sender, recipient
        self.root = root.rstrip("/")

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add the signature headers over the path and query as they travel
        (percent-encoded), less the app's mount point, and over the host and port this
        request dials (so it cannot be relayed to another server)."""
        path = request.url.raw_path.decode("ascii")
        if self.root and path.startswith(self.root + "/"):
            path = path[len(self.root):]
        request.headers.update(sign_headers(
            self.key, sender=self.sender, method=request.method, path=path,
            body=request.content, recipient=self.recipient,
            authority=authority_of(str(request.url))))
        yield request


class _Bearer(httpx.Auth):
    """The admin token (``Authorization: Bearer``): the operator's fallback without an
    identity key."""

    def __init__(self, token: str) -> None:
        self._value = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["authorization"] = self._value
        yield request


def _body(payload: Any) -> bytes:
    """The request body: ``bytes`` as given, a pydantic model or JSON-able value as compact
    JSON."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, BaseModel):
        return payload.model_dump_json().encode()
    return json.dumps(payload, separators=(",", ":")).encode()


def _success(response: httpx.Response, by: str, what: str | None = None) -> httpx.Response:
    """``response`` when its status is 2xx; its :class:`RequestRefused` otherwise (``what``:
    the task the request served, which the refusal's message names)."""
    if not response.is_success:
        raise RequestRefused.of(response, by=by, what=what)
    return response


@overload
def _parsed(response: httpx.Response, model: type[T], by: str, what: str | None) -> T: ...
@overload
def _parsed(response: httpx.Response, model: None, by: str, what: str | None) -> None: ...
def _parsed(response: httpx.Response, model: type[T] | None, by: str,
            what: str | None) -> T | None:
    """The answer read as ``model`` (None: its body is not read); ``RequestRefused`` unless
    2xx."""
    _success(response, by, what)
    return None if model is None else TypeAdapter(model).validate_json(response.content)


def _refused(response: httpx.Response, limit: int, why: str) -> httpx.DecodingError:
    request = response.request
    return httpx.DecodingError(f"the answer to {request.method} {request.url.path} {why}: "
                               f"refused (at most {limit} bytes uncompressed, "
                               f"max_answer_bytes)", request=request)


def _check_head(response: httpx.Response, limit: int) -> None:
    """Refuse from its headers an answer that is compressed (a few kB of gzip can hold
    gigabytes, so the bound is on the bytes as they travel; requests ask for ``identity``) or
    declares more than ``limit`` bytes."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise _refused(response, limit, f"is compressed ({encoding})")
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise _refused(response, limit, f"declares {length} bytes")


def _taken(response: httpx.Response, limit: int, body: bytearray, chunk: bytes) -> None:
    body += chunk
    if len(body) > limit:
        raise _refused(response, limit, f"is over {limit} bytes")


def _whole(response: httpx.Response, body: bytearray) -> httpx.Response:
    """The streamed ``response`` with its body read: a response of the same class (a test
    client's may be another httpx generation's)."""
    return type(response)(response.status_code, headers=response.headers, content=bytes(body),
                          request=response.request)


def _read_capped(response: httpx.Response, limit: int) -> httpx.Response:
    """``response`` (streamed, not read) read whole, refused (``httpx.DecodingError``) past
    ``limit`` bytes: the other party decides nothing about how much this process holds."""
    with contextlib.closing(response):
        _check_head(response, limit)
        body = bytearray()
        for chunk in response.iter_raw():
            _taken(response, limit, body, chunk)
    return _whole(response, body)


async def _aread_capped(response: httpx.Response, limit: int) -> httpx.Response:
    """The async twin of :func:`_read_capped`."""
    try:
        _check_head(response, limit)
        body = bytearray()
        async for chunk in response.aiter_raw():
            _taken(response, limit, body, chunk)
    finally:
        await response.aclose()
    return _whole(response, body)


class _Base(Generic[_H]):
    """What both clients share: the httpx client, its default signer and request building."""

    http: _H
    _http_type: type[_H]

    def __init__(self, base_url: str = "", *, key: Ed25519PrivateKey | None = None,
                 sender: str | None = None, recipient: str = SERVER_SENDER,
                 admin_token: str | None = None, ca: Path | str | None = None,
                 client_cert: tuple[str, str] | None = None,
                 verify: ssl.SSLContext | bool | None = None, timeout_s: float = 30.0,
                 http: _H | None = None, public_only: bool = False,
                 max_answer_bytes: int = _MAX_ANSWER_BYTES) -> None:
        if (key is None) != (sender is None):
            raise ValueError("give both key and sender (a signed client), or neither")
        if public_only and (http is not None or self._http_type is not httpx.AsyncClient):
            raise ValueError("public_only is for an AsyncSignedClient that makes its own "
                             "connections")
        self._root = urlsplit(str(http.base_url) if http is not None else base_url).path
        self.auth: httpx.Auth | None = (
            self.signer(key, sender, recipient=recipient)
            if key is not None and sender is not None
            else _Bearer(admin_token) if admin_token else None)
        self.bytes_sent = 0  # request bodies, for the benchmarks
        self.max_answer_bytes = max_answer_bytes
        self._by = "the server" if recipient == SERVER_SENDER else f"member {recipient}"
        self._owned = http is None
        trust = tls_verify(ca, client_cert) if verify is None else verify
        # A party-supplied URL: each connection dials the public address it checked.
        checked: dict[str, Any] = ({"transport": checked_transport(trust), "trust_env": False}
                                   if public_only else {})
        self.http = http if http is not None else self._http_type(
            base_url=base_url, timeout=timeout_s, verify=trust, **checked)

    def signer(self, key: Ed25519PrivateKey, sender: str, *,
               recipient: str = SERVER_SENDER) -> SignedAuth:
        """A signer for this client's base URL, to pass as one request's ``auth`` (a caller
        whose identity changes: enrollment, key rotation)."""
        return SignedAuth(key, sender, recipient=recipient, root=self._root)

    def _request(self, method: str, path: str, payload: Any, *, media: str | None,
                 auth: _AuthArg) -> httpx.Request:
        """The request, signed here rather than by the transport's client: a starlette test
        client (another httpx generation) takes no foreign ``httpx.Auth``."""
        content = b"" if payload is None else _body(payload)
        self.bytes_sent += len(content)
        binary = isinstance(payload, bytes)
        kind = media or ("application/octet-stream" if binary else "application/json")
        request = self.http.build_request(method, path, content=content,
                                          headers={"content-type": kind,
                                                   "accept-encoding": "identity"})
        signer = self.auth if auth is _Use.CLIENT_AUTH else auth
        return request if signer is None else next(signer.auth_flow(request))


class SignedClient(_Base[httpx.Client]):
    """A synchronous client of a fedmor app at ``base_url``.

    Signed with ``key`` as ``sender`` (for ``recipient``: the server by default), else with
    ``admin_token``, else unsigned (enrollment, health). TLS: ``ca`` (a CA bundle) and
    ``client_cert`` (certificate and key files, for mutual TLS), or a prepared ``verify``.
    ``http``: an existing ``httpx.Client`` to send through (a test client, a shared pool); it
    keeps its own base URL and TLS, and is not closed here. ``max_answer_bytes``: the most an
    answer's body may hold (64 MiB by default); a larger one is refused before it is held.
    """

    _http_type = httpx.Client

    def request(self, method: str, path: str, payload: Any = None, *, media: str | None = None,
                auth: _AuthArg = _Use.CLIENT_AUTH) -> httpx.Response:
        """Send one request and return the response whatever its status (``payload``:
        ``bytes`` sent as they are, else JSON; ``auth``: another signer, or None for none).
        An answer over ``max_answer_bytes`` raises ``httpx.DecodingError`` unread."""
        return _read_capped(self.http.send(
            self._request(method, path, payload, media=media, auth=auth), stream=True),
            self.max_answer_bytes)

    def get(self, path: str, model: type[T], *, what: str | None = None) -> T:
        """``GET path``: its JSON answer read as ``model`` (a pydantic model, or a type such
        as ``list[RoundInfo]``); :class:`RequestRefused` unless the status is 2xx (``what``:
        the task the request serves, named by the refusal's message instead of the path)."""
        return _parsed(self.request("GET", path), model, self._by, what)

    @overload
    def post(self, path: str, payload: Any, model: type[T], *, what: str | None = None) -> T: ...
    @overload
    def post(self, path: str, payload: Any = None, model: None = None, *,
             what: str | None = None) -> None: ...
    def post(self, path: str, payload: Any = None, model: type[T] | None = None, *,
             what: str | None = None) -> T | None:
        """``POST path`` with ``payload`` (``bytes`` as they are, a pydantic model or a
        JSON-able value as JSON): the answer read as ``model`` (without one, its body is not
        read); :class:`RequestRefused` unless the status is 2xx (``what``: see :meth:`get`)."""
        return _parsed(self.request("POST", path, payload), model, self._by, what)

    def download(self, path: str, *, what: str | None = None) -> httpx.Response:
        """``GET path`` for a body that is no schema (a router's parameters): the response;
        :class:`RequestRefused` unless the status is 2xx (``what``: see :meth:`get`)."""
        return _success(self.request("GET", path), self._by, what)

    def close(self) -> None:
        """Close the connections (not those of an ``http`` client passed in)."""
        if self._owned:
            self.http.close()

    def __enter__(self) -> SignedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSignedClient(_Base[httpx.AsyncClient]):
    """The asynchronous twin of :class:`SignedClient`: the same arguments (``http``: an
    ``httpx.AsyncClient``), the same signing and errors, awaitable calls. With
    ``public_only``, every connection resolves its host once, refuses it unless every address
    is public (not private, loopback, link-local, reserved, unspecified or multicast) and
    dials the address it checked: for URLs another party supplied (a member's reward URL)."""

    _http_type = httpx.AsyncClient

    async def request(self, method: str, path: str, payload: Any = None, *,
                      media: str | None = None,
                      auth: _AuthArg = _Use.CLIENT_AUTH) -> httpx.Response:
        """Send one request and return the response whatever its status (see
        :meth:`SignedClient.request`)."""
        return await _aread_capped(await self.http.send(
            self._request(method, path, payload, media=media, auth=auth), stream=True),
            self.max_answer_bytes)

    async def get(self, path: str, model: type[T], *, what: str | None = None) -> T:
        """``GET path`` (see :meth:`SignedClient.get`)."""
        return _parsed(await self.request("GET", path), model, self._by, what)

    @overload
    async def post(self, path: str, payload: Any, model: type[T], *,
                   what: str | None = None) -> T: ...
    @overload
    async def post(self, path: str, payload: Any = None, model: None = None, *,
                   what: str | None = None) -> None: ...
    async def post(self, path: str, payload: Any = None, model: type[T] | None = None, *,
                   what: str | None = None) -> T | None:
        """``POST path`` (see :meth:`SignedClient.post`)."""
        return _parsed(await self.request("POST", path, payload), model, self._by, what)

    async def download(self, path: str, *, what: str | None = None) -> httpx.Response:
        """``GET path`` for a body that is no schema (see :meth:`SignedClient.download`)."""
        return _success(await self.request("GET", path), self._by, what)

    async def aclose(self) -> None:
        """Close the connections (not those of an ``http`` client passed in)."""
        if self._owned:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncSignedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
