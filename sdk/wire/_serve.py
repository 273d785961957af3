"""Running an app (server or member) on uvicorn, the one way both apps serve."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

__all__ = ["serve"]


def serve(app: Any, *, host: str, port: int, tls_cert: Path | None, tls_key: Path | None,
          log_level: str = "info") -> None:
    """Run ``app`` on uvicorn, over HTTPS when a certificate is given; the apps' ``fedmor.*``
    loggers write to stderr at ``log_level`` (the access log only at debug: every long poll
    would be a line)."""
    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both tls_cert and tls_key, or neither")
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("fedmor").setLevel(log_level.upper())
    logging.getLogger("fedmor").info("listening on %s://%s:%d", "https" if tls_cert else "http",
                                     host, port)
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                access_log=log_level == "debug",
                ssl_certfile=str(tls_cert) if tls_cert else None,
                ssl_keyfile=str(tls_key) if tls_key else None)
