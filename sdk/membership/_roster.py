"""The consortium roster file: client names, identity keys and one-time enrollment tokens."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdk.wire import Role, parse_public_key

__all__ = ["RosterEntry", "RosterFile", "add_to_roster"]


class RosterEntry(BaseModel):
    """One institution: its name, Ed25519 identity key and the hash of its enrollment token."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
    public_key: str
    token_sha256: str | None = None
    role: Role = "member"


class RosterFile(BaseModel):
    """The whole roster (a JSON file)."""

    model_config = ConfigDict(extra="forbid")

    clients: list[RosterEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_name_one_key(self) -> RosterFile:
        # Names that differ only by case read as one institution to a person; one key under two
        # names would let one holder act as two members (two shares of every round).
        names: dict[str, str] = {}
        keys: dict[str, str] = {}
        for c in self.clients:
            other = names.setdefault(c.name.casefold(), c.name)
            if other != c.name:
                raise ValueError(f"roster names {other!r} and {c.name!r} differ only by case")
            other = keys.setdefault(c.public_key, c.name)
            if other != c.name:
                raise ValueError(f"{other!r} and {c.name!r} have the same public key: one key "
                                 "is one identity")
        return self

    @classmethod
    def load(cls, path: Path) -> RosterFile:
        """Read a roster; a missing file is an empty roster."""
        return cls() if not path.exists() else cls.model_validate_json(path.read_text())

    def save(self, path: Path) -> None:
        """Write the roster atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.model_dump(), indent=2) + "\n")
        tmp.replace(path)


def add_to_roster(path: Path, *, name: str, public_key: str, role: Role = "member") -> str:
    """Add (or re-key) ``name`` with ``role`` and return a fresh one-time enrollment token
    (only its hash is stored)."""
    parse_public_key(public_key)
    roster = RosterFile.load(path)
    # Hex, not URL-safe base64: one token in 64 of those starts with '-', which a command line
    # (`--token TOKEN`) reads as an option.
    token = secrets.token_hex(24)
    entry = RosterEntry(name=name, public_key=public_key,
                        token_sha256=hashlib.sha256(token.encode()).hexdigest(), role=role)
    roster = RosterFile(clients=[c for c in roster.clients if c.name != name] + [entry])
    roster.save(path)
    return token
