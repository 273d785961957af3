"""Wire schema of the operator console's login: ``POST /v1/console/links`` answers with a
short-lived, single-use link that a browser opens to get a console session."""

from __future__ import annotations

from pydantic import Field

from sdk.wire._schemas import _Reply

__all__ = ["ConsoleLink"]


class ConsoleLink(_Reply):
    """A one-time console login link (``fedmor console`` prints it with the server's URL)."""

    path: str = Field(description="the link's path on the server: /console/login/<token>")
    expires_at: float = Field(description="Unix s after which the link is refused")
    session_s: float = Field(description="how long the console session it opens lasts")
