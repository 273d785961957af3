"""What a caller trusts a fedmor app's TLS with: the system's CAs, or the consortium's CA
bundle and, for mutual TLS, its own certificate."""

from __future__ import annotations

import ssl
from pathlib import Path

__all__ = ["tls_verify"]


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
