"""Who may call what: signed identities with a roster role, and the admin bearer token.

Every signed request names its sender; the sender's enrolled row gives its public key and its
role (``member``, ``aligner``, ``auditor``, ``operator``; ``admin`` for the bearer token). Each
route declares the roles that may call it (``sdk.serving.for_roles``); the app's header check
(``SizeLimit``) reads that declaration and the caller's role (:meth:`Access.role_of`) and
refuses any other role before a byte of the body is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from sdk.serving import SignatureCheck, authenticate, check_bearer, signature_check
from sdk.wire import AuthError
from server_app._settings import ServerSettings
from server_app._store import Store

__all__ = ["ADMIN", "ANY_ROLE", "SIGNED_ROLES", "Access", "Identity"]

ADMIN = "admin"
"""The caller id (and role) of a request that presented the admin bearer token."""
SIGNED_ROLES = ("member", "aligner", "auditor", "operator")
"""The roles of enrolled (signing) identities."""
ANY_ROLE = (*SIGNED_ROLES, ADMIN)
"""Every role: a route any enrolled identity or the admin token may call declares these."""
_REVOKED = "revoked"  # the cached role of a revoked identity: its signature still checks out


class Identity(NamedTuple):
    """An authenticated caller: its id and role (``admin`` for the bearer token)."""

    caller_id: str
    role: str


class Access:
    """The server's authentication: key and role lookups (cached until a rotation or a
    revocation calls :meth:`forget`), nonces, and one check per kind of endpoint."""

    def __init__(self, store: Store, cfg: ServerSettings) -> None:
        self.store, self.cfg = store, cfg
        # The host:port forms this server is reached at: a signature naming another is refused.
        self.authorities = cfg.signed_authorities(host=cfg.host, port=cfg.port,
                                                  tls_cert=cfg.tls_cert)
        self._rows: dict[str, tuple[str, str]] = {}  # caller id -> (public key, role)
        self._seen: dict[str, float] = {}  # caller id -> time of its last signed request
        # The key a revoked identity last had (set by server_app._identity._identities): its signed
        # requests get "revoked" (403), not "unknown sender".
        self.revoked_key_of: Callable[[str], str | None] = lambda sender: None
        # The keys an identity rotated away from (set by server_app._identity._identities): a request one
        # of them signed gets 401 "rotated out", not the 403 of a bad signature.
        self.retired_keys_of: Callable[[str], list[str]] = lambda sender: []

    def _row(self, sender: str) -> tuple[str, str] | None:
        if sender not in self._rows:
            client = self.store.client(sender)
            if client is None:
                key = self.revoked_key_of(sender)
                if key is None:
                    return None
                self._rows[sender] = (key, _REVOKED)
            else:
                self._rows[sender] = (client.public_key, client.role)
        return self._rows[sender]

    def forget(self, sender: str) -> None:
        """Drop ``sender``'s cached key and role (its key rotated, or it was revoked)."""
        self._rows.pop(sender, None)

    def take_seen(self) -> dict[str, float]:
        """The last-request times recorded since the previous call (then forgotten)."""
        seen, self._seen = self._seen, {}
        return seen

    def cached_key_of(self, sender: str) -> str | None:
        """``sender``'s key if it is cached (no store read), else None."""
        row = self._rows.get(sender)
        return None if row is None else row[0]

    def key_of(self, sender: str) -> str | None:
        """The enrolled public key of ``sender`` (None: unknown)."""
        row = self._row(sender)
        return None if row is None else row[0]

    def role_of(self, sender: str) -> str:
        """The role of an enrolled ``sender`` (call after its signature checked out)."""
        row = self._row(sender)
        if row is None:  # revoked (and forgotten) between its signature check and now
            raise AuthError(f"identity {sender} is not enrolled", status=403)
        if row[1] == _REVOKED:
            raise AuthError(f"identity {sender} was revoked by the consortium operator",
                            status=403)
        return row[1]

    def use_nonce(self, sender: str, nonce: str, ts: float) -> bool:
        """Record a request's nonce; False if it was used (a replay)."""
        self._seen[sender] = time.time()
        return self.store.use_nonce(sender, nonce, ts, keep_s=2 * self.cfg.max_clock_skew_s + 60)

    def _kw(self) -> dict[str, Any]:
        return {"public_key_of": self.key_of, "use_nonce": self.use_nonce,
                "max_skew_s": self.cfg.max_clock_skew_s, "retired_keys_of": self.retired_keys_of,
                "authorities": self.authorities}

    def admin(self, request: Request) -> None:
        """Accept only the admin bearer token (the header check compared it once and counted
        it against the ``admin`` caps)."""
        check_bearer(request.scope, self.cfg.admin_token)

    async def caller(self, request: Request) -> Identity:
        """The route's caller, its nonce recorded: the admin bearer token or a signed
        identity. Its role is one the route declared (``for_roles``): the header check
        refused any other before the body."""
        if request.headers.get("authorization"):
            self.admin(request)
            return Identity(ADMIN, ADMIN)
        sender = await authenticate(request, **self._kw())
        return Identity(sender, self.role_of(sender))

    async def operator_view(self, request: Request) -> bool:
        """Whether a request with credentials comes from the operator role or the admin token
        (``/metrics`` shows them per-member series); a bad credential raises."""
        return (await self.caller(request)).role in ("operator", ADMIN)

    async def caller_id(self, request: Request) -> str:
        """The id of the route's caller (see :meth:`caller`)."""
        return (await self.caller(request)).caller_id

    async def caller_with_body(self, request: Request) -> tuple[Identity, bytes]:
        """Like :meth:`caller`, for an endpoint that reads a raw body: the body too, read
        after the headers checked out (a signed body is read once, by the signature check)."""
        if request.headers.get("authorization"):
            self.admin(request)
            return Identity(ADMIN, ADMIN), await request.body()
        check = await signature_check(request, **self._kw())
        sender = await run_in_threadpool(check)
        return Identity(sender, self.role_of(sender)), check.body

    async def check(self, request: Request) -> SignatureCheck:
        """A signed request's check (body read) to run in the endpoint's own worker thread:
        the round endpoints then cost one thread hop, not two."""
        return await signature_check(request, **self._kw())
