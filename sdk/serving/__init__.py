"""Running either app: the uvicorn start-up with its connection limits and log format, the
settings base both apps read their file and environment into, and the operator's probes
(readiness, Prometheus metrics) and rate-limit refusal they both install. It sits on the wire
contract (``sdk.wire``) and the store (``sdk.storage``) and knows neither app.
"""

from sdk.serving._serve import configure_logging, serve, tls_verify

__all__: list[str] = ["configure_logging", "serve", "tls_verify"]
