"""Read a source's rows one batch at a time: JSONL, CSV, Parquet, Arrow, a ``datasets`` folder
(``save_to_disk``) or an in-memory ``datasets.Dataset``.

Each row comes with where it was found (file and 1-based line or row), so every later error can
name the record; images referred to by path are relative to ``Row.base``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk.data._errors import PreferenceDataError
from sdk.data._loading import contained_path, json_objects

__all__ = ["Row", "count_rows", "is_missing", "read_rows"]

_TABLE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv")


_MISSING_TEXT = ("", "nan")
"""Cell texts that mean "no value" (an empty CSV cell; pandas writes a missing value as NaN)."""


def is_missing(value: Any) -> bool:
    """Whether a cell holds no value: ``None``, a float NaN, or an empty / ``NaN`` text."""
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in _MISSING_TEXT


@dataclass(frozen=True)
class Row:
    """One source record: its values, the file and record number, and the folder for paths."""

    values: dict[str, Any]
    file: Path
    number: int
    base: Path

    def error(self, message: str) -> PreferenceDataError:
        """An error naming this record: ``file:number: message``."""
        return PreferenceDataError(self.file, message, line=self.number)


def _inside(folder: Path, name: Any, named_in: Path) -> Path:
    """``folder/name``, refused unless it stays inside ``folder`` once resolved: a path a source
    names or holds (a ``datasets`` index entry, a symlink) may not make the import read a file
    elsewhere, as an image path may not (``contained_path``)."""
    if not isinstance(name, str):
        raise PreferenceDataError(named_in, f"names a {type(name).__name__}, not a path")
    try:
        contained_path(folder, name, "the source folder")
    except ValueError as exc:
        raise PreferenceDataError(named_in, f"path {name!r} {exc}") from None
    return folder / name


def _index(index: Path, key: str, field: str | None) -> list[Any]:
    """The entries of a ``datasets`` index file's ``key`` list (``field`` of each, if given)."""
    try:
        entries = json.loads(index.read_text(encoding="utf-8")).get(key, [])
        return [entry if field is None else entry[field] for entry in entries]
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise PreferenceDataError(index, f"malformed {key!r} list ({exc!r})") from None


def _files(source: Path) -> list[Path]:
    """The data files of ``source``: itself, a ``datasets`` folder's shards, or a folder's;
    each inside ``source`` and a regular file (a FIFO or device would block or never end)."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise PreferenceDataError(source, "source not found")
    info = source / "dataset_dict.json"
    if info.is_file():  # DatasetDict.save_to_disk: one folder per split
        return [f for split in _index(info, "splits", None)
                for f in _files(_inside(source, split, info))]
    state = source / "state.json"
    if state.is_file():  # Dataset.save_to_disk: Arrow stream shards named in state.json
        shards = [_inside(source, name, state)
                  for name in _index(state, "_data_files", "filename")]
        for shard in shards:
            if not shard.is_file():
                raise PreferenceDataError(shard, "not found, or not a regular file")
        return shards
    found = sorted(_inside(source, str(p.relative_to(source)), p) for p in source.rglob("*")
                   if p.suffix in _TABLE_SUFFIXES and p.is_file())
    if not found:
        raise PreferenceDataError(source, f"no data files ({', '.join(_TABLE_SUFFIXES)}) found")
    return found


def _arrow_batches(path: Path, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    import pyarrow as pa  # heavy: imported only when used
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".parquet":
            # pre_buffer (pyarrow's default) keeps read-ahead buffers that grow with the file.
            parquet = pq.ParquetFile(path, pre_buffer=False)
            for batch in parquet.iter_batches(batch_size=batch_rows, use_threads=False):
                yield batch.to_pylist()
            return
        with pa.OSFile(str(path)) as handle:
            try:
                reader: Any = pa.ipc.open_stream(handle)  # what save_to_disk writes
                for batch in reader:
                    yield batch.to_pylist()
                return
            except pa.ArrowInvalid:
                handle.seek(0)
            file_reader = pa.ipc.open_file(handle)  # the Arrow file format
            for index in range(file_reader.num_record_batches):
                yield file_reader.get_batch(index).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise PreferenceDataError(path, f"unreadable ({exc})") from exc


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            for values in reader:
                if None in values:
                    raise PreferenceDataError(
                        path, "more values than header columns", line=reader.line_num
                    )
                yield reader.line_num, dict(values)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise PreferenceDataError(path, f"unreadable CSV ({exc})", line=reader.line_num) from exc


def _file_rows(path: Path, batch_rows: int) -> Iterator[Row]:
    if path.suffix in (".jsonl", ".json"):
        for number, values in json_objects(path):
            yield Row(values, path, number, path.parent)
    elif path.suffix == ".csv":
        for number, values in _csv_rows(path):
            yield Row(values, path, number, path.parent)
    else:
        number = 0
        for batch in _arrow_batches(path, batch_rows):
            for values in batch:
                number += 1
                yield Row(values, path, number, path.parent)


def read_rows(source: Any, batch_rows: int) -> Iterator[Row]:
    """Every row of ``source`` (a path, or a ``datasets.Dataset`` whose images arrive as PIL)."""
    if not isinstance(source, (str, Path)):
        if not hasattr(source, "iter"):
            raise TypeError(f"source must be a path or a datasets.Dataset, got {type(source)}")
        where, number = Path("<dataset>"), 0
        for batch in source.iter(batch_size=batch_rows):
            names = list(batch)
            for index in range(len(batch[names[0]]) if names else 0):
                number += 1
                yield Row({name: batch[name][index] for name in names}, where, number, Path.cwd())
        return
    for path in _files(Path(source)):
        yield from _file_rows(path, batch_rows)


def count_rows(source: Any) -> int | None:
    """The number of rows, where it is known without reading them (Parquet, Arrow file
    metadata, an in-memory dataset); ``None`` otherwise (the progress bar then counts up)."""
    if not isinstance(source, (str, Path)):
        return len(source) if hasattr(source, "__len__") else None
    try:
        files = _files(Path(source))
    except PreferenceDataError:
        return None
    if not all(f.suffix == ".parquet" for f in files):
        return None
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
