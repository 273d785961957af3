"""The operator console's routes (an ``APIRouter`` that ``create_app`` includes).

- ``POST /v1/console/links``: a signed ``operator`` identity mints a one-time login link (the
  admin token and every other role get 403);
- ``GET /console/login/{token}``: spends the link, sets the session cookie, sends the browser
  on to ``/console`` (303); a used, expired or unknown link gets 403 and a page saying which;
- ``GET /console``: the page (401 without a live session); ``POST /console/logout``;
- ``GET /console/assets/console.css``: the one stylesheet (nothing loads from elsewhere).

Every console response forbids framing, caching, referrers and any source but the server's own
(``Content-Security-Policy: default-src 'self'``); the page runs no script at all.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoint annotations.

from typing import Annotated

from fastapi import APIRouter, Cookie, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from sdk.serving import NotFoundError, for_roles
from sdk.wire import ConsoleLink
from server_app._console._auth import COOKIE, ConsoleLogins, LoginRefused
from server_app._console._page import ASSETS, ConsoleSources, ConsoleView, message_page, render
from server_app._identity._access import Access
from server_app._settings._console import CONSOLE_PATH, ConsoleSettings

__all__ = ["CONSOLE_PATH", "SECURITY_HEADERS", "console_router", "install_console"]

SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}
_CSS = (ASSETS / "console.css").read_bytes()


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def console_router(logins: ConsoleLogins, sources: ConsoleSources, access: Access,
                   refresh_s: int, *, tls: bool = False) -> APIRouter:
    """The console's endpoints over ``logins`` (its tokens) and ``sources`` (what it shows);
    with ``tls`` (the server serves HTTPS) the session cookie is ``Secure`` whatever scheme a
    request names."""
    router = APIRouter(tags=["console"])

    @router.post("/v1/console/links", response_model=ConsoleLink,
                 openapi_extra=for_roles("operator"))  # a signed operator: not the admin token
    def mint(who: Annotated[str, Depends(access.caller_id)]) -> ConsoleLink:
        """A single-use login link to the operator console, valid ``console.link_ttl_s``
        (signed ``operator`` identities only)."""
        return logins.mint(who)

    @router.get(CONSOLE_PATH + "/login/{token}", response_class=HTMLResponse, include_in_schema=False)
    def login(request: Request, token: str) -> Response:
        try:
            session = logins.redeem(token)
        except LoginRefused as exc:
            return _page(message_page("login link refused", str(exc), logins.cfg.link_ttl_s), 403)
        response = RedirectResponse(CONSOLE_PATH, status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(COOKIE, session, max_age=int(logins.cfg.session_s), path=CONSOLE_PATH,
                            httponly=True, samesite="strict",
                            secure=tls or request.url.scheme == "https")
        return response

    @router.get(CONSOLE_PATH, response_class=HTMLResponse, include_in_schema=False)
    async def page(session: Annotated[str | None, Cookie(alias=COOKIE)] = None) -> Response:
        found = await run_in_threadpool(logins.session, session)
        if found is None:
            return _page(message_page("sign in", "This browser has no console session, or it "
                                      "ended.", logins.cfg.link_ttl_s), 401)
        view = await run_in_threadpool(ConsoleView.gather, sources, found[0])
        return _page(render(view, refresh_s=refresh_s, session_expires=found[1]))

    @router.post(CONSOLE_PATH + "/logout", response_class=HTMLResponse, include_in_schema=False)
    def logout(request: Request,
               session: Annotated[str | None, Cookie(alias=COOKIE)] = None) -> Response:
        origin = request.headers.get("origin")
        own = str(request.base_url).rstrip("/")
        if origin is not None and origin.rstrip("/") != own:  # another site's form or script
            return _page(message_page("sign-out refused", f"a sign-out from {origin} is not "
                                      "this console's own", logins.cfg.link_ttl_s), 403)
        logins.end(session)
        response = _page(message_page("signed out", "The console session ended.",
                                         logins.cfg.link_ttl_s))
        response.delete_cookie(COOKIE, path=CONSOLE_PATH, httponly=True, samesite="strict")
        return response

    @router.get(CONSOLE_PATH + "/assets/console.css", include_in_schema=False)
    def stylesheet() -> Response:
        return Response(_CSS, media_type="text/css", headers=SECURITY_HEADERS)

    return router


def _disabled_router() -> APIRouter:
    """With ``console.enabled`` false: the link endpoint answers 404 (and no page exists)."""
    router = APIRouter(tags=["console"])

    @router.post("/v1/console/links", response_model=ConsoleLink,
                 openapi_extra=for_roles("operator"))
    def mint() -> ConsoleLink:
        """Disabled on this server (``console.enabled``)."""
        raise NotFoundError("the operator console is disabled on this server (console.enabled)")

    return router


def install_console(app: FastAPI, sources: ConsoleSources, access: Access,
                    cfg: ConsoleSettings, *, tls: bool = False) -> ConsoleLogins | None:
    """The console's routes on ``app`` (``app.state.console``: its logins, whose ``clock``
    tests move), or only a 404 for link requests when ``cfg.enabled`` is false."""
    if not cfg.enabled:
        app.include_router(_disabled_router())
        return None
    logins = ConsoleLogins(sources.store, access, cfg)
    app.state.console = logins
    app.include_router(console_router(logins, sources, access, cfg.refresh_s, tls=tls))
    return logins
