"""``import_data``: read a member's own preference data and write the on-disk format.

Rows stream from the source one batch at a time through a converter of its kind into the
writer, which holds only hashes and counts; the whole output is validated before it appears.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sdk.data._errors import PreferenceDataError
from sdk.data._import_config import ImportConfig, ImportSummary, SourceKind
from sdk.data._import_items import Columns, Item
from sdk.data._import_mc import mc_item
from sdk.data._import_rows import Row, count_rows, read_rows
from sdk.data._import_scores import scores_item
from sdk.data._import_write import ImportWriter
from sdk.progress import Steps

__all__ = ["ImportInterrupted", "import_data"]

Converter = Callable[[Row, Columns, ImportSummary], Item | None]


def _pair_item(row: Row, columns: Columns, summary: ImportSummary) -> Item | None:
    """One record already in pair form (``hf``, ``csv``)."""
    image = "images" if "images" in columns.fields else "image"
    return Item(row, columns.id(row), columns.frames(row, image), columns.text(row, "prompt"),
                columns.category(row),
                [(columns.text(row, "chosen"), columns.text(row, "rejected"))])


_CONVERTERS: dict[SourceKind, Converter] = {
    SourceKind.HF: _pair_item,
    SourceKind.CSV: _pair_item,
    SourceKind.SCORES: scores_item,
    SourceKind.MC: mc_item,
}


class ImportInterrupted(KeyboardInterrupt):
    """SIGTERM arrived during an import: raised like Ctrl-C so the writer removes its folder."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`ImportInterrupted` while the import runs (its default would kill
    the process before the half-written temporary folder is removed); main thread only, where
    Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise ImportInterrupted("terminated")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def import_data(
    kind: SourceKind | str,
    source: Path | str | Any,
    out_dir: Path | str,
    config: ImportConfig | None = None,
    *,
    progress: bool = True,
) -> ImportSummary:
    """Import ``source`` (a file or folder, or a ``datasets.Dataset``) of ``kind`` into
    ``out_dir`` (``train/``, ``eval/``, ``import.json``); see ``docs/data.md``.

    Raises :class:`PreferenceDataError` naming the file and record of anything unreadable,
    ``ValueError`` if ``out_dir`` exists (unless ``config.replace``); on any error, Ctrl-C
    (``KeyboardInterrupt``) or SIGTERM (:class:`ImportInterrupted`) nothing is left behind.
    """
    kind = SourceKind(kind)
    config = config or ImportConfig()
    if kind is SourceKind.CSV and not (isinstance(source, (str, Path))
                                       and Path(source).suffix == ".csv"):
        raise ValueError(f"{source}: a csv source is a .csv file")
    columns = Columns(kind, config)
    convert = _CONVERTERS[kind]
    summary = ImportSummary(kind=kind)
    with _terminate_as_interrupt(), ImportWriter(Path(out_dir), config, summary) as writer, \
            Steps(f"import {kind.value}", count_rows(source), enabled=progress) as steps:
        for row in read_rows(source, config.batch_rows):
            summary.records_read += 1
            try:
                item = convert(row, columns, summary)
                if item is not None:
                    writer.add(item)
            except PreferenceDataError as exc:
                if not config.skip_bad or exc.path != row.file:
                    raise
                summary.skip(exc)  # a multi-frame file's frames before a bad one are kept
            steps.advance()
        writer.finish()
    return summary
