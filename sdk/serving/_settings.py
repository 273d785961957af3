"""The settings base both apps share: a TOML/JSON file, overridden by environment variables."""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, TypeVar

import tomllib
from cryptography import x509
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from sdk.serving._serve import ConnectionLimits
from sdk.wire._auth import authority_of

__all__ = ["AppHardening", "EnvOverFile", "SettingsError", "load_settings"]

_S = TypeVar("_S", bound=BaseModel)


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
    allow_plain_http: bool = Field(
        default=False, description="use plain HTTP where TLS is not set up (a local test on "
        "127.0.0.1, or TLS ended by a proxy in front): a server without tls_cert serves it, a "
        "member dials an http:// server_url; without it either refuses to start, since signed "
        "requests and their answers would cross the network unencrypted")
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
    public_urls: list[str] = Field(
        default_factory=list, description="the URLs callers reach this app at "
        "(scheme://host[:port], e.g. https://fedmor.example.org); a signed request names the "
        "host and port its signer dialled and is refused (401) unless they are one of these, "
        "so a request captured by another server cannot be relayed here. Empty: the bind "
        "host and port (with localhost, 127.0.0.1 and ::1 for a loopback or wildcard bind, "
        "and this machine's name for a wildcard one) and the TLS certificate's names")

    @field_validator("public_urls")
    @classmethod
    def _urls_have_hosts(cls, urls: list[str]) -> list[str]:
        for url in urls:
            authority_of(url)  # raises ValueError naming the URL
        return urls

    def signed_authorities(self, *, host: str, port: int, tls_cert: Path | None,
                           also: Iterable[str] = ()) -> frozenset[str]:
        """The ``host:port`` forms a signed request to this app may name: ``public_urls``
        when set, else those the bind address and the TLS certificate give; plus the URLs in
        ``also`` (a member's announced reward URL)."""
        extra = {authority_of(url) for url in also}
        if self.public_urls:
            return frozenset({authority_of(url) for url in self.public_urls} | extra)
        names = {host, *_certificate_names(tls_cert)}
        if host in ("", "0.0.0.0", "::"):
            names |= {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
        elif host == "localhost" or _is_loopback(host):
            names |= {"localhost", "127.0.0.1", "::1"}
        scheme = "https" if tls_cert is not None else "http"
        names.discard("")
        return frozenset({authority_of(f"{scheme}://{_bracketed(name)}:{port}")
                          for name in names} | extra)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bracketed(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def _certificate_names(path: Path | None) -> list[str]:
    """The DNS names (no wildcards) and IP addresses a PEM certificate is valid for."""
    if path is None or not path.exists():
        return []
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*(n for n in names.get_values_for_type(x509.DNSName) if "*" not in n),
            *(str(ip) for ip in names.get_values_for_type(x509.IPAddress))]


class SettingsError(ValueError):
    """A settings file that cannot be used: the message names the file, the line, the setting
    and what to write instead, so a reader fixes it without reading pydantic's error codes."""


def load_settings(cls: type[_S], path: Path | None, *,
                  merge: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                  source: str = "settings (environment)") -> _S:
    """Settings from ``path`` (TOML or JSON; optional) with environment overrides.

    ``merge`` turns the file's values into the ones validated (a command's flags over them);
    ``source`` names where the values come from when there is no file.

    Raises:
        SettingsError: the file does not parse or a value is refused; the message names the
            file, the line and the setting (with the nearest valid key for a misspelt one,
            and what replaced a key the model lists in its ``retired_settings``).
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
        if not isinstance(data, dict):
            raise SettingsError(f"{path}: not a table of settings (a JSON object)")
    if merge is not None:
        data = merge(data)
    try:
        return cls(**data)
    except ValidationError as exc:
        where = str(path) if path is not None else source
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
        retired: dict[str, str] = getattr(model, "retired_settings", {})
        if str(loc[-1]) in retired:
            return f"{at}{name}: no longer a setting: {retired[str(loc[-1])]}"
        known = sorted(model.model_fields) if model is not None else []
        near = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"known settings: {', '.join(known)}"
        return f"{at}{name}: unknown setting ({hint})"
    return f"{at}{name}: {err['msg']} (you wrote {err.get('input')!r})"
