"""The settings base both apps share: a TOML/JSON file, overridden by environment variables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypeVar

import tomllib
from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from sdk.serving._serve import ConnectionLimits

__all__ = ["AppHardening", "EnvOverFile", "load_settings"]

_S = TypeVar("_S", bound=BaseSettings)


class EnvOverFile(BaseSettings):
    """Environment variables override values given at construction (read from a file)."""

    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the app's log (start-up, enrollment, rounds, refusals); "
                                    "debug adds uvicorn's access log")
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON object per line (ts, level, logger, msg), "
                                    "for a log collector")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings, file_secret_settings


class AppHardening(EnvOverFile):
    """Settings both apps share: connection limits, and the switches that relax a safe
    default."""

    docs_ui: bool = Field(default=False, description="serve /docs and /redoc (they load "
                          "JavaScript from a CDN); /openapi.json is always served")
    allow_readable_files: bool = Field(default=False, description="start even when the "
                                       "identity key, TLS key or database is readable by "
                                       "other users")
    identity_key_passphrase_file: Path | None = Field(
        default=None, description="file whose first line is the identity key's passphrase "
        "(FEDMOR_KEY_PASSPHRASE wins); with one, a new key is written encrypted (PKCS#8)")
    max_control_bytes: int = Field(
        default=256 * 2**10, ge=1024, description="the body limit of every route that does not "
        "take uploads (JSON control messages: enrollment, round creation, answers, "
        "announcements); the upload routes (stage messages, router versions, image batches) "
        "take max_request_bytes; beyond: 413")
    connections: ConnectionLimits = Field(
        default_factory=ConnectionLimits, description="header and keep-alive timeouts and the "
        "cap on connections at once")


def load_settings(cls: type[_S], path: Path | None) -> _S:
    """Settings from ``path`` (TOML or JSON; optional) with environment overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    return cls(**data)
