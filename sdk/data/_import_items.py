"""The unit an import converter hands the writer (one image and prompt, its pairs) and the
column lookups every converter shares."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from sdk.data._import_config import FIELDS, ImportConfig, SourceKind
from sdk.data._import_images import Frames, frames_of
from sdk.data._import_rows import Row, is_missing

__all__ = ["Columns", "Item", "salted_id"]


@dataclass
class Item:
    """One source item: its frames (one per kept DICOM frame, else one; decoded as iterated),
    prompt, category and the ``(chosen, rejected)`` pairs it yields; ``answer``/``options`` make
    it a query too."""

    row: Row
    id: str
    frames: Frames
    prompt: str
    category: str
    pairs: list[tuple[str, str]]
    answer: str | None = None
    options: tuple[str, ...] = field(default_factory=tuple)


def salted_id(salt: str, *parts: str) -> str:
    """An id from a salted hash of ``parts`` (used where the source gives none)."""
    digest = hashlib.sha256("\0".join((salt, *parts)).encode()).hexdigest()
    return f"r{digest[:16]}"


class Columns:
    """The source column of each field of one kind, with ``ImportConfig.columns`` applied."""

    def __init__(self, kind: SourceKind, config: ImportConfig) -> None:
        self.config = config
        self.fields = FIELDS[kind]
        unknown = sorted(set(config.columns) - set(self.fields))
        if unknown:
            raise ValueError(
                f"unknown field(s) {unknown} for {kind.value!r}; fields: {', '.join(self.fields)}"
            )
        self.names = {
            name: (config.columns[name],) if name in config.columns else candidates
            for name, candidates in self.fields.items()
        }

    def value(self, row: Row, name: str, *, required: bool = True) -> Any:
        """The value of field ``name`` in ``row`` (``None`` if optional and absent; an empty or
        ``NaN`` cell is absent, never the text "NaN")."""
        for column in self.names[name]:
            if column in row.values and not is_missing(row.values[column]):
                return row.values[column]
        if required:
            tried = ", ".join(repr(c) for c in self.names[name])
            raise row.error(f"missing field {name!r} (column {tried})")
        return None

    def text(self, row: Row, name: str, value: Any = None) -> str:
        """A required, non-empty text field (numbers are written as text)."""
        found = self.value(row, name) if value is None else value
        if isinstance(found, (int, float)) and not isinstance(found, bool):
            found = str(found)
        if not isinstance(found, str):
            raise row.error(f"field {name!r} must be text, got {type(found).__name__}")
        if not found.strip():
            raise row.error(f"field {name!r} is empty")
        return found

    def id(self, row: Row) -> str:
        """The row's id column, else a salted hash of the file name and record number."""
        found = self.value(row, "id", required=False)
        if found is None:
            return salted_id(self.config.salt, row.file.name, str(row.number))
        return self.text(row, "id", found)

    def category(self, row: Row) -> str:
        """The row's category column, else ``ImportConfig.category``."""
        found = self.value(row, "category", required=False)
        return self.config.category if found is None else self.text(row, "category", found)

    def frames(self, row: Row, name: str) -> Frames:
        """The image frames of field ``name``."""
        return frames_of(row, name, self.names[name], self.config)
