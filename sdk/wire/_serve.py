"""Running an app (server or member) on uvicorn, the one way both apps serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["serve"]


def serve(app: Any, *, host: str, port: int, tls_cert: Path | None, tls_key: Path | None) -> None:
    """Run ``app`` on uvicorn, over HTTPS when a certificate is given."""
    import uvicorn

    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both tls_cert and tls_key, or neither")
    uvicorn.run(app, host=host, port=port, log_level="warning",
                ssl_certfile=str(tls_cert) if tls_cert else None,
                ssl_keyfile=str(tls_key) if tls_key else None)
