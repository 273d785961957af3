"""The one error type of the preference-data package."""

from __future__ import annotations

from pathlib import Path

__all__ = ["PreferenceDataError"]


class PreferenceDataError(ValueError):
    """A data file or one of its records is invalid.

    The message always names the file and, for a record, its 1-based line number:
    ``path/pairs.jsonl:12: field 'chosen' is empty``.
    """

    def __init__(self, path: Path | str, message: str, *, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {message}")
