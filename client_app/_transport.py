"""The member's one connection to the server: signed requests, their retries, enrollment.

Every request is signed afresh per attempt (new nonce); an unreachable server, 5xx and 429
are tried again after the refusal's ``Retry-After`` or an exponential backoff; a refusal that
stands is one ``RequestRefused`` (``MemberRevoked`` for a revoked identity); a request refused
just after the key file changed (a rotation) is sent again with the new key. The runner is
built on ``ServerTransport``; the member's helpers (key rotation, the announcements, the round
walk) take the transport, so that they need not import the runner back.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from typing import Any, TypeVar, overload

import httpx
import tenacity
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import TypeAdapter

from client_app._service import RewardService
from client_app._settings import ClientSettings
from client_app._store import ClientStore
from sdk.wire import (
    EnrollRequest,
    EnrollResponse,
    RequestRefused,
    SignedClient,
    check_private_files,
    key_passphrase,
    load_private_key,
    public_key_b64,
    tls_verify,
)

__all__ = ["RETRYABLE", "MemberRevoked", "ServerLink", "ServerTransport",
           "Unanswered", "passed_on", "reload_key", "revoked"]

_log = logging.getLogger("fedmor.client")
T = TypeVar("T")


RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Statuses the runner sends again (after the refusal's Retry-After, else its backoff): the
server's load or trouble, not a verdict on the request."""


class Unanswered(RuntimeError):
    """No answer came: the server could not be reached on any attempt, or the runner is
    stopping (it resumes after a restart)."""


class MemberRevoked(RequestRefused):
    """The server refuses this member's identity for good: the operator revoked it (403)."""


def revoked(status: int, detail: str) -> bool:
    """Whether a refusal says that the caller's identity was revoked (the server's 403 names
    it: ``identity ... was revoked by the consortium operator``)."""
    return status == 403 and "was revoked" in detail


def passed_on(refusal: RequestRefused) -> bool:
    """Whether a caller that notes a refusal and works on must pass this one on instead: the
    identity was revoked (the runner stops), or the server refused for load or trouble (the
    next pass asks again)."""
    return isinstance(refusal, MemberRevoked) or refusal.status in RETRYABLE


class ServerLink:
    """Whether the server answered the last attempt: the member says so the first time it
    cannot reach the server (WARNING, within one attempt, so within one poll interval) and
    once when it can again (INFO); not at every retry in between."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_since: float | None = None

    def down(self, exc: Exception) -> None:
        """An attempt found no server (connection refused, timeout, TLS failure)."""
        if self.down_since is None:
            self.down_since = time.monotonic()
            _log.warning("cannot reach the server at %s (server_url): %s; retrying until it "
                         "answers", self.url, exc or type(exc).__name__)

    def up(self) -> None:
        """An attempt got an answer."""
        if self.down_since is not None:
            _log.info("reached the server at %s again after %.0f s", self.url,
                      time.monotonic() - self.down_since)
            self.down_since = None


def reload_key(runner: ServerTransport) -> bool:
    """After a refused request: switch ``runner`` to the key file's key if it changed (a
    rotation by ``fedmor client rotate-key`` while the app ran); True if it did."""
    cfg = runner.settings
    try:
        key = load_private_key(cfg.identity_key, key_passphrase(cfg.identity_key_passphrase_file))
    except (OSError, ValueError):
        return False
    if public_key_b64(key) == public_key_b64(runner.key):
        return False
    runner.key = key
    _log.info("the identity key file changed (a rotation): signing with the new key")
    return True


def _again(exc: BaseException) -> bool:
    """Whether an attempt that raised ``exc`` is worth repeating: no connection, or a refusal
    for the server's load or trouble."""
    return isinstance(exc, httpx.TransportError) or (
        isinstance(exc, RequestRefused) and exc.status in RETRYABLE)


def _verify(settings: ClientSettings) -> ssl.SSLContext | bool:
    """The TLS context for the server: its CA, and this member's certificate when it names
    one (mutual TLS)."""
    return tls_verify(settings.server_ca, _client_cert(settings))


def _client_cert(settings: ClientSettings) -> tuple[str, str] | None:
    """This member's certificate and key for a server that requires them (mutual TLS)."""
    cert, key = settings.tls_client_cert, settings.tls_client_key
    if (cert is None) != (key is None):
        raise ValueError("give both tls_client_cert and tls_client_key, or neither")
    if cert is None or key is None:
        return None
    if not settings.allow_readable_files:
        check_private_files(key)
    return str(cert), str(key)


class ServerTransport:
    """A member's signed, retried requests to its server (``settings.server_url``) as the
    identity ``key``, enrolled on first use; ``stop`` cuts every wait short."""

    def __init__(self, settings: ClientSettings, store: ClientStore, key: Ed25519PrivateKey,
                 service: RewardService | None) -> None:
        self.settings, self.store, self.key, self.service = settings, store, key, service
        self.stop = threading.Event()
        self.http = SignedClient(settings.server_url, verify=_verify(settings),
                                 timeout_s=settings.request_timeout_s,
                                 max_answer_bytes=settings.max_answer_bytes)
        self.link = ServerLink(settings.server_url)

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()

    def request(self, method: str, path: str, payload: Any = None, *, signed: bool = True,
                attempts: int = 30) -> httpx.Response:
        """Send one request (``payload``: ``bytes`` as an octet-stream body, else a pydantic
        model or JSON-able value as JSON) and return its 2xx response. An unreachable server,
        5xx and 429 are tried again, up to ``attempts`` in all, after the refusal's
        ``Retry-After`` or else an exponential backoff; each attempt is signed afresh (new
        nonce). Raises ``RequestRefused`` on a final refusal (``MemberRevoked`` for a revoked
        identity) or the last retried one, ``Unanswered`` when no attempt reached the server or
        the runner is stopping."""
        backoff = tenacity.wait_exponential(multiplier=0.05, max=self.settings.retry_max_s)

        def wait(state: tenacity.RetryCallState) -> float:
            refused = state.outcome.exception() if state.outcome is not None else None
            if isinstance(refused, RequestRefused) and refused.retry_after is not None:
                return refused.wait_s
            return backoff(state)

        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(attempts), wait=wait,
                                     retry=tenacity.retry_if_exception(_again),
                                     sleep=self._backoff, reraise=True)
        try:
            return retrying(self._send, method, path, payload, signed=signed)
        except httpx.TransportError as exc:
            raise Unanswered(f"{method} {path}: the server at {self.settings.server_url} did "
                             f"not answer {attempts} attempts ({exc})") from exc

    def get(self, path: str, model: type[T], *, attempts: int = 30) -> T:
        """``GET path`` (see :meth:`request`), its answer read as ``model``."""
        return TypeAdapter(model).validate_json(self.request("GET", path,
                                                             attempts=attempts).content)

    @overload
    def post(self, path: str, payload: Any, model: type[T], *, signed: bool = True,
             attempts: int = 30) -> T: ...
    @overload
    def post(self, path: str, payload: Any, model: None = None, *, signed: bool = True,
             attempts: int = 30) -> None: ...
    def post(self, path: str, payload: Any, model: type[T] | None = None, *,
             signed: bool = True, attempts: int = 30) -> T | None:
        """``POST path`` (see :meth:`request`), its answer read as ``model`` (without one, not
        read)."""
        resp = self.request("POST", path, payload, signed=signed, attempts=attempts)
        return None if model is None else TypeAdapter(model).validate_json(resp.content)

    def _backoff(self, seconds: float) -> None:
        self.stop.wait(seconds)  # a stopping runner does not sit out its backoff

    def _send(self, method: str, path: str, payload: Any, *, signed: bool) -> httpx.Response:
        """One attempt: the 2xx response, else the refusal (``MemberRevoked`` for a revoked
        identity); ``Unanswered`` when the runner is stopping. A signed request refused
        401/403 just after the key file changed (a rotation) is sent again with the new key."""
        if self.stop.is_set():
            raise Unanswered(f"{method} {path}: runner stopping")
        resp = self._attempt(method, path, payload, signed=signed)
        if signed and resp.status_code in (401, 403) and reload_key(self):
            resp = self._attempt(method, path, payload, signed=signed)
        if resp.is_success:
            return resp
        refused = RequestRefused.of(resp)
        if signed and revoked(refused.status, refused.reason):
            raise MemberRevoked.of(resp)
        raise refused

    def _attempt(self, method: str, path: str, payload: Any, *, signed: bool) -> httpx.Response:
        # The identity is read per attempt: enrollment sets the id, a rotation the key.
        auth = self.http.signer(self.key, self.client_id) if signed else None
        try:
            resp = self.http.request(method, path, payload, auth=auth)
        except httpx.TransportError as exc:
            self.link.down(exc)
            raise
        self.link.up()
        return resp

    @property
    def client_id(self) -> str:
        """The id the server gave us (enrolls on first use)."""
        stored = self.store.get("client_id")
        return stored if stored is not None else self.enroll()

    def enroll(self) -> str:
        """Enroll with the one-time token unless already enrolled; returns the client id."""
        stored = self.store.get("client_id")
        if stored is not None:
            return stored
        token = self.settings.enrollment_token
        if token is None:
            raise ValueError("not enrolled yet and no enrollment_token configured")
        body = EnrollRequest.of(self.key, name=self.settings.name, token=token.get_secret_value(),
                                reward_url=self.settings.public_url,
                                clip_bound=None if self.service is None else self.service.clip)
        resp = self.post("/v1/enroll", body, EnrollResponse, signed=False)
        self.store.put("server_public_key", resp.server_public_key)
        self.store.put("client_id", resp.client_id)
        _log.info("enrolled with %s as %s", self.settings.server_url, resp.client_id)
        return resp.client_id
