"""Settings of the operator console (``[console]`` in the server's settings file)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CONSOLE_PATH", "ConsoleSettings"]

CONSOLE_PATH = "/console"
"""Where the console lives; its pages authenticate by the session cookie, not by signed
headers, so the server's header check lets anonymous requests reach this path and below."""


class ConsoleSettings(BaseModel):
    """The operator console's page and its logins: a signed operator request mints a login
    link (``fedmor console``); the link opens one browser session."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="serve /console and mint login links "
                          "(false: both answer 404)")
    link_ttl_s: float = Field(default=60.0, gt=0, le=600, description="a login link is "
                              "refused this long after it was minted (and once it was used)")
    session_s: float = Field(default=3600.0, gt=0, le=43_200, description="how long the "
                             "session a link opens lasts; then run `fedmor console` again")
    refresh_s: int = Field(default=10, ge=2, le=3600, description="the page reloads itself "
                           "this often (no JavaScript: a meta refresh)")
