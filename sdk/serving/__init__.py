"""Running either app: the uvicorn start-up with its connection limits and log format, the
settings base both apps read their file and environment into, the header check that
authenticates and authorizes a request before its body (``SizeLimit``, the roles a route
declares with ``for_roles``), the per-identity caps (``Limiter``), the typed errors and their
4xx answers, the rate-limit refusal both install, the operator's probes (readiness,
Prometheus metrics) and their periodic background work. It sits on the wire contract
(``sdk.wire``) and the store (``sdk.storage``) and knows neither app. Each name loads its
module on first use, so a command that only reads an app's settings imports no web framework.
"""

from typing import TYPE_CHECKING

from sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from sdk._periodic import periodically
    from sdk.serving._admission import HeaderAuth, SizeLimit, check_bearer, for_roles
    from sdk.serving._errors import (
        ERROR_RESPONSES,
        ConflictError,
        NotFoundError,
        docs_ui,
        install_errors,
    )
    from sdk.serving._limits import Limiter, RateLimited, RequestLimits, install_limits
    from sdk.serving._ops import StoredGauge, install_ops
    from sdk.serving._request import SignatureCheck, authenticate, signature_check, stage_payload
    from sdk.serving._serve import configure_logging, serve
    from sdk.serving._settings import AppHardening, load_settings

__all__: list[str] = [
    "ERROR_RESPONSES",
    "AppHardening",
    "ConflictError",
    "HeaderAuth",
    "Limiter",
    "NotFoundError",
    "RateLimited",
    "RequestLimits",
    "SignatureCheck",
    "SizeLimit",
    "StoredGauge",
    "authenticate",
    "check_bearer",
    "configure_logging",
    "docs_ui",
    "for_roles",
    "install_errors",
    "install_limits",
    "install_ops",
    "load_settings",
    "periodically",
    "serve",
    "signature_check",
    "stage_payload",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
