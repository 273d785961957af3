"""Profiles: one identity at one consortium server, declared once (``fedmor enroll`` writes it).

A profile holds where the server is, how to verify it (CA) and present a client certificate
(mutual TLS), which identity key signs and under which client id and role. Profiles live in
``profiles.toml`` in the user's config folder (``$FEDMOR_CONFIG_DIR``, else the platform's:
``$XDG_CONFIG_HOME/fedmor`` or ``~/.config/fedmor``, ``~/Library/Application Support/fedmor``
on macOS, ``%APPDATA%\\fedmor`` on Windows), mode 0600: it names key files, never their
contents. Like ssh, the commands refuse a profiles file or key file that other users may read
or write, and a profiles folder they may write (another user could point the commands at
their own server, or sign as you).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sdk.storage import replace_file
from sdk.wire import Role

__all__ = ["CONFIG_DIR_ENV", "Profile", "ProfileBook", "check_owner_only", "config_dir",
           "profiles_path"]

CONFIG_DIR_ENV = "FEDMOR_CONFIG_DIR"
"""The environment variable that moves the config folder (a test, a second user on one
account)."""
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


def config_dir() -> Path:
    """The user's fedmor config folder (not created here)."""
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV]).expanduser()
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "fedmor"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "fedmor"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "fedmor"


def check_owner_only(path: Path) -> None:
    """Refuse (``PermissionError``, with the command that mends it) a file that users other
    than its owner may read or write: a profiles file they could point at their own server,
    or a key they could sign with."""
    if sys.platform == "win32":  # no POSIX modes: the folder's ACL protects it
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise PermissionError(f"permissions {mode:04o} for '{path}' are too open: other users "
                              f"may read or change it; run chmod 600 {path}")


def _check_folder(folder: Path) -> None:
    """Refuse (``PermissionError``, with the command that mends it) a profiles folder that
    users other than its owner may write: they could put their own profiles file in it, or
    rename another of the owner's files into its place."""
    if sys.platform == "win32":  # no POSIX modes: the folder's ACL protects it
        return
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o022:
        raise PermissionError(f"permissions {mode:04o} for folder '{folder}' are too open: "
                              f"other users may replace the profiles in it; run chmod 700 "
                              f"{folder}")


def profiles_path() -> Path:
    """Where the profiles are kept."""
    return config_dir() / "profiles.toml"


class Profile(BaseModel):
    """One enrolled identity at one server; paths are absolute (the file is read from any
    folder)."""

    model_config = ConfigDict(extra="forbid")

    server: str = Field(description="the server's URL, e.g. https://host:8443")
    ca: Path | None = Field(default=None, description="CA bundle that verifies the server")
    client_cert: Path | None = Field(default=None, description="client certificate (PEM) for "
                                     "a server that requires one (mutual TLS)")
    client_key: Path | None = Field(default=None, description="the key of client_cert (PEM)")
    identity: Path = Field(description="the Ed25519 identity key that signs requests")
    client_id: str = Field(description="the id enrollment gave this identity")
    name: str = Field(pattern=_NAME, description="the identity's roster name")
    role: Role = Field(description="what the identity may do at the server")
    insecure_http: bool = Field(default=False, description="the server is plain http:// "
                                "(enrolled with --insecure-http: local tests only)")


def _toml_value(value: object) -> str:
    # JSON strings are TOML basic strings (same escapes), so json.dumps quotes safely.
    return "true" if value is True else json.dumps(str(value))


class ProfileBook(BaseModel):
    """Every profile by name, and which one commands use when none is named."""

    model_config = ConfigDict(extra="forbid")

    default: str | None = None
    profiles: dict[str, Profile] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> ProfileBook:
        """The book at ``path`` (default: :func:`profiles_path`); missing: empty."""
        path = path or profiles_path()
        if not path.exists():
            return cls()
        _check_folder(path.parent)
        check_owner_only(path)
        try:
            return cls.model_validate(tomllib.loads(path.read_text()))
        except (tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ValueError(f"{path} is not a valid profiles file: {exc}") from None

    def save(self, path: Path | None = None) -> Path:
        """Write the book (mode 0600, atomically) and return its path."""
        path = path or profiles_path()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lines = [] if self.default is None else [f"default = {_toml_value(self.default)}", ""]
        for name, profile in sorted(self.profiles.items()):
            lines.append(f"[profiles.{_toml_value(name)}]")
            lines += [f"{key} = {_toml_value(value)}"
                      for key, value in profile.model_dump().items()
                      if value is not None and value is not False]
            lines.append("")
        _check_folder(path.parent)
        return replace_file(path, "\n".join(lines))  # 0600: it names the user's key files

    def add(self, name: str, profile: Profile) -> None:
        """Keep ``profile`` as ``name`` (replacing one of that name); the first is the
        default."""
        self.profiles[name] = profile
        if self.default is None or self.default not in self.profiles:
            self.default = name

    def pick(self, name: str | None) -> tuple[str, Profile]:
        """The profile called ``name``, else the default, else the only one."""
        if name is not None:
            if name not in self.profiles:
                known = ", ".join(sorted(self.profiles)) or "none"
                raise ValueError(f"no profile named {name!r} (profiles: {known}; `fedmor "
                                 f"enroll ... --profile {name}` creates it)")
            return name, self.profiles[name]
        if self.default in self.profiles:
            return self.default, self.profiles[self.default]
        if len(self.profiles) == 1:
            return next(iter(self.profiles.items()))
        if not self.profiles:
            raise ValueError(f"no profile in {profiles_path()}: run `fedmor enroll` first, "
                             f"or give --server and the identity options")
        raise ValueError(f"several profiles and no default: give --profile NAME or run "
                         f"`fedmor profile use NAME` ({', '.join(sorted(self.profiles))})")
