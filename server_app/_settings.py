"""Server configuration: a TOML/JSON file plus ``FEDMOR_SERVER_*`` environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import tomllib
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

__all__ = ["ServerSettings", "load_settings"]

_S = TypeVar("_S", bound=BaseSettings)


class _EnvOverFile(BaseSettings):
    """Environment variables override values given at construction (read from a file)."""

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings, file_secret_settings


class _AppHardening(_EnvOverFile):
    """Settings both apps share that relax a safe default."""

    docs_ui: bool = Field(default=False, description="serve /docs and /redoc (they load "
                          "JavaScript from a CDN); /openapi.json is always served")
    allow_readable_files: bool = Field(default=False, description="start even when the "
                                       "identity key, TLS key or database is readable by "
                                       "other users")


class ServerSettings(_AppHardening):
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


def load_settings(cls: type[_S], path: Path | None) -> _S:
    """Settings from ``path`` (TOML or JSON; optional) with environment overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    return cls(**data)
