"""Server configuration: a TOML/JSON file plus ``FEDMOR_SERVER_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from sdk.wire import AppHardening, load_settings

__all__ = ["ServerSettings", "load_settings"]

class ServerSettings(AppHardening):
    """Everything the consortium server needs; every field has a working default."""

    model_config = SettingsConfigDict(env_prefix="FEDMOR_SERVER_", extra="forbid")

    db_path: Path = Field(default=Path("fedmor-server/server.db"), description="SQLite store")
    identity_key: Path = Field(default=Path("fedmor-server/identity.pem"),
                               description="server Ed25519 key (created if missing)")
    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    tls_cert: Path | None = Field(default=None, description="PEM certificate chain (HTTPS)")
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert")
    tls_ca: Path | None = Field(default=None,
                                description="CA bundle that signs client apps' certificates")
    roster_file: Path | None = Field(default=None, description="JSON roster loaded at start")
    admin_token: SecretStr | None = Field(default=None,
                                          description="bearer token for admin endpoints")
    max_request_bytes: int = Field(default=64 * 2**20, ge=1024)
    max_clock_skew_s: float = Field(default=300.0, gt=0)
    stage_deadline_s: float = Field(default=120.0, gt=0)
    tick_interval_s: float = Field(default=1.0, gt=0)
    reward_timeout_s: float = Field(default=60.0, gt=0)
    reward_poll_s: float = Field(default=0.05, gt=0)
    allow_http_reward_urls: bool = Field(default=False, description="accept plain-http push "
                                         "URLs at enrollment (local tests only)")
    work_recheck_s: float = Field(default=0.25, gt=0, description="a held GET /v1/work also "
                                  "re-reads the store this often: it notices reward queries "
                                  "queued by a broker in another process")
