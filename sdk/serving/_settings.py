"""The settings base both apps share: a TOML/JSON file, overridden by environment variables."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

import tomllib
from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from sdk.serving._serve import ConnectionLimits

__all__ = ["AppHardening", "EnvOverFile", "SettingsError", "load_settings"]

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


class SettingsError(ValueError):
    """A settings file that cannot be used: the message names the file, the line, the setting
    and what to write instead, so a reader fixes it without reading pydantic's error codes."""


def load_settings(cls: type[_S], path: Path | None) -> _S:
    """Settings from ``path`` (TOML or JSON; optional) with environment overrides.

    Raises:
        SettingsError: the file does not parse or a value is refused; the message names the
            file, the line and the setting (with the nearest valid key for a misspelt one).
    """
    data: dict[str, Any] = {}
    text = ""
    if path is not None:
        text = path.read_text()
        try:
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise SettingsError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}"
                                f": {exc}") from None
    try:
        return cls(**data)
    except ValidationError as exc:
        where = str(path) if path is not None else "settings (environment)"
        problems = [_problem(cls, err, text) for err in exc.errors()]
        raise SettingsError(f"{where}: " + "; ".join(problems)) from None


def _model_at(cls: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings model that holds the last key of ``loc`` (a section's model), if any."""
    model: type[BaseModel] | None = cls
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if model is not None else None
        annotation = getattr(field, "annotation", None)
        model = annotation if isinstance(annotation, type) and issubclass(
            annotation, BaseModel) else None
    return model


def _line_of(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The 1-based line where ``loc``'s key is written in a TOML text (its section's if nested)."""
    key = re.escape(str(loc[-1]))
    section = ".".join(str(p) for p in loc[:-1])
    current = ""
    for number, line in enumerate(text.splitlines(), start=1):
        head = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if head:
            current = head.group(1)
        elif current == section and re.match(rf"\s*[\"']?{key}[\"']?\s*=", line):
            return number
    return None


def _problem(cls: type[BaseModel], err: Any, text: str) -> str:
    """One refused value as a sentence: ``line 4: [alignment] max_itms: unknown setting (did
    you mean 'max_items'?)``."""
    loc = tuple(err["loc"]) or ("?",)
    line = _line_of(text, loc)
    at = f"line {line}: " if line is not None else ""
    section = ".".join(str(p) for p in loc[:-1])
    name = f"[{section}] {loc[-1]}" if section else str(loc[-1])
    if err["type"] == "extra_forbidden":
        model = _model_at(cls, loc)
        known = sorted(model.model_fields) if model is not None else []
        near = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"known settings: {', '.join(known)}"
        return f"{at}{name}: unknown setting ({hint})"
    return f"{at}{name}: {err['msg']} (you wrote {err.get('input')!r})"
