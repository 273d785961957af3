"""Logins to the operator console.

A browser cannot sign our requests, so a signed ``operator`` request (``POST
/v1/console/links``, what ``fedmor console`` sends) mints a login link: a random 256-bit token,
kept only as its sha256, refused after ``console.link_ttl_s`` or its first use. Opening it
starts a session: another random token, in an HttpOnly, SameSite=Strict cookie (Secure over
TLS) that lives ``console.session_s`` and opens only the console's pages. Every page checks
again that the session's identity is still an enrolled operator, so a revocation ends it.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

from sdk.wire import AuthError, ConsoleLink
from server_app._identity._access import Access
from server_app._settings._console import CONSOLE_PATH, ConsoleSettings
from server_app._store import Store

__all__ = ["COOKIE", "ConsoleLogins", "LoginRefused"]

COOKIE = "fedmor_console"
_LINK, _SESSION = "link", "session"


class LoginRefused(Exception):
    """A login link that cannot open a session (unknown, used, expired, or its operator is
    no longer one); the message says which, for the person holding the link."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ConsoleLogins:
    """Mint, redeem and check console tokens; ``clock`` (Unix seconds) is injectable, so
    tests move time instead of waiting for it."""

    def __init__(self, store: Store, access: Access, cfg: ConsoleSettings,
                 clock: Callable[[], float] = time.time) -> None:
        self.store, self.access, self.cfg, self.clock = store, access, cfg, clock

    def _is_operator(self, caller_id: str) -> bool:
        try:
            return self.access.role_of(caller_id) == "operator"
        except AuthError:  # revoked since
            return False

    def mint(self, operator: str) -> ConsoleLink:
        """A new single-use login link for ``operator`` (already checked to be one)."""
        token, now = secrets.token_hex(32), self.clock()
        expires = now + self.cfg.link_ttl_s
        self.store.put_console_token(_digest(token), _LINK, operator, expires, now)
        self.store.audit(operator, "console_link", expires_at=expires)
        return ConsoleLink(path=f"{CONSOLE_PATH}/login/{token}", expires_at=expires,
                           session_s=self.cfg.session_s)

    def redeem(self, token: str) -> str:
        """Spend a login link: the token of a new session (``console.session_s`` long)."""
        now = self.clock()
        row = self.store.console_token(_digest(token), _LINK)
        if row is None:
            raise LoginRefused("this console login link is not valid")
        if row.used_at is not None:
            raise LoginRefused("this console login link was used already: each link opens "
                               "one session")
        if now > row.expires_at:
            raise LoginRefused("this console login link expired: links last "
                               f"{self.cfg.link_ttl_s:g} s")
        if not self.store.use_console_token(_digest(token), now):  # another request won
            raise LoginRefused("this console login link was used already: each link opens "
                               "one session")
        operator = row.operator
        if not self._is_operator(operator):
            raise LoginRefused(f"identity {operator} is no longer an enrolled operator")
        session, expires = secrets.token_hex(32), now + self.cfg.session_s
        self.store.put_console_token(_digest(session), _SESSION, operator, expires, now)
        self.store.audit(operator, "console_login", expires_at=expires)
        return session

    def session(self, session: str | None) -> tuple[str, float] | None:
        """``(operator, expires_at)`` of a session cookie; None when it is missing, unknown,
        expired, or its identity is no longer an enrolled operator."""
        if not session:
            return None
        row = self.store.console_token(_digest(session), _SESSION)
        if row is None or self.clock() > row.expires_at:
            return None
        return (row.operator, row.expires_at) if self._is_operator(row.operator) else None

    def end(self, session: str | None) -> None:
        """Sign a session out (its cookie no longer opens anything)."""
        if session:
            self.store.drop_console_token(_digest(session))
