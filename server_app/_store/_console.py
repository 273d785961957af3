"""The server store's operator-console logins: one-time login links and the sessions they
open, each kept only as the sha256 of its random token (a copy of the database opens none).

Rows come back as frozen dataclasses (``Row``): a row stays inside the server, so only a row
that is a reply as stored is worth a pydantic model, and none here is.
"""

from __future__ import annotations

from dataclasses import dataclass

from server_app._store._base import Row, StoreBase

__all__ = ["ConsoleTables", "ConsoleTokenRow"]


@dataclass(frozen=True)
class ConsoleTokenRow(Row):
    """A login link or a session, by the sha256 of its token."""

    token_sha256: str
    kind: str  # "link" or "session"
    operator: str  # the client id of the operator it opens the console to
    expires_at: float
    used_at: float | None  # None: unused (a link is single use)

_KEEP_S = 3600.0  # an expired token's row is kept this long (a late use is told it expired)


class ConsoleTables(StoreBase):
    """Console tokens: ``kind`` is ``link`` (single use) or ``session``."""

    def put_console_token(self, token_sha256: str, kind: str, operator: str,
                          expires_at: float, now: float) -> None:
        """Keep a new token's hash (and drop the rows of tokens long expired)."""
        with self.transaction():
            self._db.execute("DELETE FROM console_tokens WHERE expires_at < ?", (now - _KEEP_S,))
            self._db.execute("INSERT INTO console_tokens VALUES (?,?,?,?,NULL)",
                             (token_sha256, kind, operator, expires_at))

    def console_token(self, token_sha256: str, kind: str) -> ConsoleTokenRow | None:
        """A token's row by hash and kind, or None."""
        return self._row(ConsoleTokenRow, "SELECT * FROM console_tokens WHERE token_sha256=? "
                                          "AND kind=?", (token_sha256, kind))

    def use_console_token(self, token_sha256: str, now: float) -> bool:
        """Mark a single-use token used; False when it was used already (one winner even for
        two requests at once: the update is conditional)."""
        with self.transaction():
            cur = self._db.execute("UPDATE console_tokens SET used_at=? WHERE token_sha256=? "
                                   "AND used_at IS NULL", (now, token_sha256))
            return cur.rowcount == 1

    def drop_console_token(self, token_sha256: str) -> None:
        """Forget a token (a session that signed out)."""
        self._write("DELETE FROM console_tokens WHERE token_sha256=?", (token_sha256,))
