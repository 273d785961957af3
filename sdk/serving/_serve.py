"""Running an app (server or member) on uvicorn, the one way both apps serve."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sdk._heap import freeze_heap_from_now_on

__all__ = ["ConnectionLimits", "configure_logging", "serve"]

_log = logging.getLogger("fedmor.serve")

# Over TLS, closing a connection waits for the peer's close_notify, which an idle keep-alive
# client never sends (asyncio waits long for it), and the app's stop waits for every
# connection: an idle one closed at shutdown is cut after this grace.
_CLOSE_GRACE_S = 1.0


class ConnectionLimits(BaseModel):
    """How long a connection may take and how many the app serves at once (``[connections]``
    in either app's settings)."""

    model_config = ConfigDict(extra="forbid")

    header_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="a connection must send a request's complete "
        "headers within this many seconds of connecting or of the request's first byte; "
        "else it is closed (a client that sends headers byte by byte holds nothing longer)")
    body_timeout_s: float = Field(
        default=60.0, gt=0, le=3600, description="a request's body must have arrived whole "
        "within this many seconds of its headers; else 408 and the connection is closed (a "
        "client that trickles a body holds its slot no longer; keep it above the largest "
        "upload's time on the slowest member's link)")
    keep_alive_s: int = Field(
        default=15, ge=1, le=600, description="an idle keep-alive connection is closed after "
        "this many seconds; longer than httpx's 5 s keep-alive expiry, so a member's client "
        "drops an idle connection before the server can close it under a request on its way")
    max_connections: int = Field(
        default=2048, ge=1, description="connections (and requests in progress) at once; "
        "beyond: 503 (keep the process's open-file limit above it)")


def _header_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a header deadline: a timer armed when a connection
    opens or a request's first byte arrives, disarmed when its headers are complete (uvicorn
    has no such timeout of its own). A connection past it is cut at once, and an idle one that
    the app's stop closes after ``_CLOSE_GRACE_S``: neither waits for a TLS peer's reply."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderDeadline(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            _log.info("closed a connection from %s: no complete request headers within %g s",
                      self.client[0] if self.client else "?", timeout_s)
            self.transport.abort()

        def shutdown(self) -> None:
            super().shutdown()
            if self.transport.is_closing():  # it was idle; one in a request ends with it
                self.loop.call_later(_CLOSE_GRACE_S, self.transport.abort)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

    return HeaderDeadline


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure_logging(level: str, fmt: str = "text") -> None:
    """The apps' ``fedmor.*`` loggers write to stderr at ``level``: timestamped text lines, or
    (``fmt="json"``) one JSON object per line."""
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonLines() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("fedmor")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(level.upper())


def serve(app: Any, *, host: str, port: int, tls_cert: Path | None, tls_key: Path | None,
          log_level: str = "info", log_format: str = "text",
          client_ca: Path | None = None, connections: ConnectionLimits | None = None) -> None:
    """Run ``app`` on uvicorn, over HTTPS when a certificate is given, logging at
    ``log_level`` (uvicorn's access log only at debug: every long poll would be a line), with
    ``connections``' timeouts and cap (default: ``ConnectionLimits()``).

    ``client_ca``: mutual TLS, every connection must present a certificate this CA signed
    (the TLS handshake fails otherwise, before any request is read)."""
    import ssl

    import uvicorn
    from uvicorn.server import STARTUP_FAILURE

    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both tls_cert and tls_key, or neither")
    if client_ca is not None and tls_cert is None:
        raise ValueError("client_ca (mutual TLS) needs tls_cert and tls_key")
    configure_logging(log_level, log_format)
    logging.getLogger("fedmor").info("listening on %s://%s:%d%s", "https" if tls_cert else "http",
                                     host, port, " (client certificates required)"
                                     if client_ca else "")
    limits = connections or ConnectionLimits()

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # the app's start-up loads are done: its heap stays as it is
                freeze_heap_from_now_on()

    server = Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=log_level == "debug",
        http=_header_timeout_protocol(limits.header_timeout_s),
        timeout_keep_alive=limits.keep_alive_s, limit_concurrency=limits.max_connections,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        ssl_ca_certs=str(client_ca) if client_ca else None,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE))
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # as uvicorn.run: a failed start-up is the process's failure
        sys.exit(STARTUP_FAILURE)
