"""Running either app: the uvicorn start-up with its connection limits and log format, the
settings base both apps read their file and environment into, the operator's probes (readiness,
Prometheus metrics), the rate-limit refusal both install and their periodic background work.
It sits on the wire contract (``sdk.wire``) and the store (``sdk.storage``) and knows neither
app.
"""

from sdk._periodic import periodically
from sdk.serving._ops import StoredGauge, install_ops
from sdk.serving._rate_limit import RateLimited
from sdk.serving._serve import configure_logging, serve
from sdk.serving._settings import AppHardening, load_settings

__all__: list[str] = ["AppHardening", "RateLimited", "StoredGauge", "configure_logging",
                      "install_ops", "load_settings", "periodically", "serve"]
