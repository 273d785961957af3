"""Listings: a rich table for people, ``--json`` for scripts (one JSON value on stdout)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["emit", "print_table", "when"]


def when(at: float | None) -> str:
    """A UTC time stamp, or ``-``."""
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%SZ")


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                title: str | None = None) -> None:
    """``rows`` under ``columns`` as a rich table on stdout (plain text when not a terminal:
    no colour codes in a pipe or a log); a cell's brackets are printed as they are."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(*columns, title=title, box=None, header_style="bold", pad_edge=False)
    for row in rows:  # cells as plain text: a setting's "[section] key" is not rich markup
        table.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    console = Console()
    if not console.is_terminal:  # a pipe or a log: one line per row, never wrapped at 80
        console = Console(width=4096)
    console.print(table)


def emit(data: Any, as_json: bool, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
         title: str | None = None) -> int:
    """``data`` as JSON with ``--json``, else the table; returns the exit status 0."""
    if as_json:
        print(json.dumps(data))
    else:
        print_table(columns, rows, title=title)
    return 0
