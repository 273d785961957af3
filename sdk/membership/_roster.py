"""The consortium roster file: client names, identity keys and one-time enrollment tokens."""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sdk.storage import replace_file
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

    FILE_MODE: ClassVar[int] = 0o666
    """The file's mode before the umask: a new file's usual mode, since the roster holds no
    secret (names, public keys, hashes of one-time tokens) and members keep copies of it."""

    @model_validator(mode="after")
    def _one_name_one_key(self) -> RosterFile:
        clash = _clash([(c.name, c.public_key) for c in self.clients])
        if clash is not None:
            raise ValueError(clash[1])
        return self

    @classmethod
    def load(cls, path: Path) -> RosterFile:
        """Read a roster; a missing file is an empty roster. An invalid one raises
        ``ValueError`` naming the file, the line of the entry at fault and the command that
        mends it."""
        if not path.exists():
            return cls()
        text = path.read_text()
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(_invalid(path, text, exc)) from None

    def with_entry(self, entry: RosterEntry) -> RosterFile:
        """This roster with ``entry`` in place of any entry of its name; ``ValueError`` in one
        line when it clashes (a name differing only by case, a key under two names)."""
        try:
            return RosterFile(clients=[c for c in self.clients if c.name != entry.name]
                              + [entry])
        except ValidationError as exc:
            raise ValueError(_refusal(exc)) from None

    def save(self, path: Path) -> None:
        """Replace the roster file whole (:func:`~sdk.storage.replace_file`): a reader sees
        the old roster or the new one, never a part."""
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(self.model_dump(), indent=2) + "\n", mode=self.FILE_MODE)


def _clash(entries: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The later name of the first clash among (name, key) entries and why, else None. Names
    that differ only by case read as one institution to a person; one key under two names
    would let one holder act as two members (two shares of every round)."""
    names: dict[str, str] = {}
    keys: dict[str, str] = {}
    for name, key in entries:
        other = names.setdefault(name.casefold(), name)
        if other != name:
            return name, f"roster names {other!r} and {name!r} differ only by case"
        other = keys.setdefault(key, name)
        if other != name:
            return name, f"{other!r} and {name!r} have the same public key: one key is one identity"
    return None


def _refusal(exc: ValueError) -> str:
    """Why a roster was refused, in one line: the first error without pydantic's framing
    (which would also print the roster it was given, token hashes included)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ()))
    why = str(first.get("msg", exc)).removeprefix("Value error, ")
    return f"{where}: {why}" if where else why


def _invalid(path: Path, text: str, exc: ValidationError) -> str:
    """What is wrong with roster file ``path``: the line of the entry at fault and the
    ``fedmor`` command that removes it (or the first error, where no entry is at fault)."""
    try:
        entries = [(str(c.get("name", "")), str(c.get("public_key", "")))
                   for c in json.loads(text).get("clients", [])]
    except (ValueError, AttributeError):
        entries = []
    clash = _clash(entries)
    if clash is None:
        return (f"roster file {path} is not a valid roster: {_refusal(exc)} "
                f"(mend the file, or write it again with `fedmor roster add --roster {path}`)")
    name, why = clash
    needle = json.dumps(name)
    line = next((n for n, text_line in enumerate(text.splitlines(), 1)
                 if needle in text_line), 0)
    return (f"roster file {path}, line {line}: {why}; remove the entry with "
            f"`fedmor roster remove --roster {path} --name {name}`")


def remove_from_roster(path: Path, name: str) -> bool:
    """Remove ``name``'s entry from roster file ``path`` (even from an invalid roster, so the
    command that mends one works on it); False if it lists no such name."""
    text = path.read_text()
    try:
        raw = json.loads(text)
        clients = raw["clients"]
        kept = [c for c in clients if c.get("name") != name]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(f"roster file {path} is not a valid roster: not a JSON object whose "
                         f"clients are entries (mend the file, or move it away and add the "
                         f"identities again with `fedmor roster add --roster {path}`)") from None
    if len(kept) == len(clients):
        return False
    try:
        roster = RosterFile.model_validate({**raw, "clients": kept})
    except ValidationError as exc:
        raise ValueError(f"roster file {path} is not a valid roster without {name!r} either: "
                         f"{_refusal(exc)} (mend the file)") from None
    roster.save(path)
    return True


def add_to_roster(path: Path, *, name: str, public_key: str, role: Role = "member") -> str:
    """Add (or re-key) ``name`` with ``role`` and return a fresh one-time enrollment token
    (only its hash is stored)."""
    parse_public_key(public_key)
    roster = RosterFile.load(path)
    # Hex, not URL-safe base64: one token in 64 of those starts with '-', which a command line
    # (`--token TOKEN`) reads as an option.
    token = secrets.token_hex(24)
    try:
        entry = RosterEntry(name=name, public_key=public_key,
                            token_sha256=hashlib.sha256(token.encode()).hexdigest(), role=role)
        roster = roster.with_entry(entry)
    except ValueError as exc:  # a ValidationError of the entry is one too
        raise ValueError(f"cannot add {name!r} to roster file {path}: "
                         f"{_refusal(exc)}") from None
    roster.save(path)  # validated above (a clash raises): nothing is written
    return token
