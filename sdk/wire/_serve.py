"""Running an app (server or member) on uvicorn, the one way both apps serve, and the TLS
context their callers verify it with."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

__all__ = ["configure_logging", "serve", "tls_verify"]


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def tls_verify(ca: Path | str | None, cert: tuple[str, str] | None = None
               ) -> ssl.SSLContext | bool:
    """What an HTTP client verifies a fedmor app with: ``True`` (the system's CAs) without a
    CA bundle or client certificate, else a context trusting ``ca`` and presenting ``cert``
    (certificate and key files, for a server that requires one: mutual TLS)."""
    if ca is None and cert is None:
        return True
    context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


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
          client_ca: Path | None = None) -> None:
    """Run ``app`` on uvicorn, over HTTPS when a certificate is given, logging at
    ``log_level`` (uvicorn's access log only at debug: every long poll would be a line).

    ``client_ca``: mutual TLS, every connection must present a certificate this CA signed
    (the TLS handshake fails otherwise, before any request is read)."""
    import ssl

    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both tls_cert and tls_key, or neither")
    if client_ca is not None and tls_cert is None:
        raise ValueError("client_ca (mutual TLS) needs tls_cert and tls_key")
    configure_logging(log_level, log_format)
    logging.getLogger("fedmor").info("listening on %s://%s:%d%s", "https" if tls_cert else "http",
                                     host, port, " (client certificates required)"
                                     if client_ca else "")
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                access_log=log_level == "debug",
                ssl_certfile=str(tls_cert) if tls_cert else None,
                ssl_keyfile=str(tls_key) if tls_key else None,
                ssl_ca_certs=str(client_ca) if client_ca else None,
                ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE)
