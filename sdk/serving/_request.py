"""What an endpoint reads from a signed request: its signature check (verified once per
request, its nonce recorded by the endpoint's store), its body hashed against the signed digest,
and a stage message's payload."""

from __future__ import annotations

import hashlib
import logging
import urllib.parse
from collections.abc import Callable, Collection

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from sdk.wire import SERVER_SENDER, AuthError, PayloadError, StagePayload, StageSubmit
from sdk.wire._auth import BAD_SIGNATURE, SignedRequest, parse_public_key, signed_by, verify_signed

__all__ = ["CHECK", "BodyNotSigned", "RetiredKeys", "SignatureCheck", "authenticate",
           "header_check", "signature_check", "signed_target", "stage_payload"]

_log = logging.getLogger("fedmor.auth")
RetiredKeys = Callable[[str], list[str]]  # sender -> the keys it rotated away from
CHECK = "fedmor.check"  # the scope key of a request's verified ``SignatureCheck``


class BodyNotSigned(HTTPException):
    """A signed request's body does not hash to the digest its signature covers (HTTP 403; an
    ``HTTPException``, so FastAPI's body parsing passes it on as it is)."""

    def __init__(self) -> None:
        super().__init__(403, BAD_SIGNATURE)


def signed_target(scope: Scope) -> str:
    """The path and query a request's signature covers: as they travelled, percent-encoded
    (``raw_path``), so a signer and a verifier agree on one form and an encoded ``?``, ``#``
    or ``/`` cannot make one signed request read as another."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else urllib.parse.quote(scope["path"])
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


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
    check = scope.get(CHECK)
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
        request.scope[CHECK] = check
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
