"""Load and validate a data directory: ``pairs.jsonl`` / ``queries.jsonl`` plus image files.

Every record is checked before anything is returned, and the first problem raises a
:class:`PreferenceDataError` naming the file and the line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from PIL import Image

from sdk.data._errors import PreferenceDataError
from sdk.data._records import PreferencePair, Query

__all__ = [
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MAX_IMAGE_SIDE",
    "PAIRS_FILE",
    "QUERIES_FILE",
    "contained_path",
    "fit_to_pixels",
    "iter_pairs",
    "iter_queries",
    "json_objects",
    "load_pairs",
    "load_queries",
    "open_bounded_image",
]

PAIRS_FILE = "pairs.jsonl"
QUERIES_FILE = "queries.jsonl"
DEFAULT_MAX_IMAGE_SIDE = 1024
"""The largest image side (pixels) read from a file or a request; a larger declared size is refused
before decoding (decompression bombs)."""
DEFAULT_MAX_IMAGE_BYTES = 8 * 1024 * 1024

_PAIR_FIELDS = ("id", "image", "prompt", "chosen", "rejected", "category")
_QUERY_FIELDS = ("id", "image", "prompt", "category")


def json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` of each non-blank line of a JSONL file, read one line at a time
    (an import's source and output can be large); a line that is not a JSON object is an error."""
    with path.open(encoding="utf-8", newline="") as handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PreferenceDataError(
                        path, f"malformed JSON ({exc.msg})", line=number
                    ) from exc
                if not isinstance(record, dict):
                    raise PreferenceDataError(path, "record is not a JSON object", line=number)
                yield number, record
        except UnicodeDecodeError as exc:
            raise PreferenceDataError(path, f"not UTF-8 text ({exc.reason})") from exc


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; duplicate ids are an error."""
    if not path.is_file():
        raise PreferenceDataError(path, "file not found")
    seen: dict[str, int] = {}
    for number, record in json_objects(path):
        record_id = record.get("id")
        if isinstance(record_id, str) and record_id in seen:
            raise PreferenceDataError(
                path, f"duplicate id {record_id!r} (first on line {seen[record_id]})", line=number
            )
        yield number, record
        if isinstance(record_id, str):
            seen[record_id] = number


def _text(record: dict[str, Any], name: str, path: Path, line: int) -> str:
    """A required, non-empty string field."""
    if name not in record:
        raise PreferenceDataError(path, f"missing field {name!r}", line=line)
    value = record[name]
    if not isinstance(value, str):
        raise PreferenceDataError(
            path, f"field {name!r} must be a string, got {type(value).__name__}", line=line
        )
    if not value.strip():
        raise PreferenceDataError(path, f"field {name!r} is empty", line=line)
    return value


def open_bounded_image(source: Path | IO[bytes], max_side: int = DEFAULT_MAX_IMAGE_SIDE
                       ) -> Image.Image:
    """Decode ``source`` as RGB, refusing an image over ``max_side`` pixels a side before its
    pixels are decoded: a small PNG can declare 30000x30000 and cost gigabytes to decode.

    Raises ``ValueError`` naming the size, or the reason the bytes are unreadable.
    """
    try:
        opened = Image.open(source)
    except Image.DecompressionBombError as exc:  # PIL's own header check came first
        raise ValueError(f"is over the limit of {max_side} px a side ({exc})") from exc
    except (OSError, ValueError) as exc:
        raise ValueError(f"is unreadable ({exc})") from exc
    with opened:
        width, height = opened.size  # read from the header, before decoding the pixels
        if max(width, height) > max_side:
            raise ValueError(f"is {width}x{height}, over the limit of {max_side} px a side")
        try:
            # A cut-off file decodes (the missing rows black) unless checked: ``verify``
            # reads its chunks to the end (PNG: every CRC and the IEND), without decoding.
            opened.verify()
        except (OSError, ValueError, SyntaxError) as exc:
            raise ValueError(f"is unreadable ({exc})") from exc
    if isinstance(source, Path):
        reopened = Image.open(source)
    else:
        source.seek(0)
        reopened = Image.open(source)
    with reopened:
        try:
            return reopened.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise ValueError(f"is unreadable ({exc})") from exc


def fit_to_pixels(image: Image.Image, max_pixels: int | None) -> Image.Image:
    """``image`` scaled down, aspect kept, to at most ``max_pixels`` pixels (a model's input
    size: its processor would shrink it anyway, and a smaller image costs less to keep and to
    preprocess); returned as is when it fits or there is no bound."""
    if max_pixels is None or image.width * image.height <= max_pixels:
        return image
    scale = math.sqrt(max_pixels / (image.width * image.height))
    size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
    return image.resize(size, Image.Resampling.BICUBIC)


def contained_path(directory: Path, relative: str, where: str = "the data directory") -> Path:
    """``directory/relative`` resolved (symlinks followed), refused with ``ValueError`` when it
    is absolute or lands outside ``directory`` (``where`` names it): a data file may name only
    images inside its folder, so it cannot make a reader open or copy out any other file."""
    candidate = Path(relative)
    if candidate.is_absolute():
        raise ValueError(f"is absolute and escapes {where}; name images relative to {directory}")
    resolved = (directory / candidate).resolve()
    if not resolved.is_relative_to(directory.resolve()):
        raise ValueError(f"escapes {where} {directory} (by '..' or a symlink)")
    return resolved


def _image(
    directory: Path, relative: str, path: Path, line: int, max_side: int, max_bytes: int
) -> Image.Image:
    """Open ``directory/relative`` as RGB, refusing escapes, missing, oversized or bad files."""
    try:
        resolved = contained_path(directory, relative)
    except ValueError as exc:
        raise PreferenceDataError(path, f"image path {relative!r} {exc}", line=line) from exc
    if not resolved.is_file():
        raise PreferenceDataError(path, f"image {relative!r} not found", line=line)
    size = resolved.stat().st_size
    if size > max_bytes:
        raise PreferenceDataError(
            path, f"image {relative!r} is {size} bytes, over the limit of {max_bytes}", line=line
        )
    try:
        return open_bounded_image(resolved, max_side)
    except ValueError as exc:
        raise PreferenceDataError(path, f"image {relative!r} {exc}", line=line) from exc


def _options(record: dict[str, Any], path: Path, line: int) -> tuple[str, ...]:
    value = record.get("options", [])
    if not isinstance(value, list) or not all(isinstance(o, str) and o.strip() for o in value):
        raise PreferenceDataError(
            path, "field 'options' must be a list of non-empty strings", line=line
        )
    return tuple(value)


def _answer(record: dict[str, Any], options: tuple[str, ...], path: Path, line: int) -> str | None:
    if record.get("answer") is None:
        return None
    answer = _text(record, "answer", path, line)
    if options and answer not in options:
        raise PreferenceDataError(
            path, f"answer {answer!r} is not one of the options {list(options)}", line=line
        )
    return answer


_R = TypeVar("_R")


def _nonempty(records: Iterator[_R], path: Path) -> list[_R]:
    """All of ``records``; a file without one is refused, since a split with no records would
    train or evaluate on nothing."""
    out = list(records)
    if not out:
        raise PreferenceDataError(path, "no records")
    return out


def _checked_directory(directory: Path | str) -> Path:
    root = Path(directory)
    if not root.is_dir():
        raise PreferenceDataError(root, "data directory not found")
    return root


def load_pairs(
    directory: Path | str,
    *,
    max_image_side: int = DEFAULT_MAX_IMAGE_SIDE,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> list[PreferencePair]:
    """Load and validate ``directory/pairs.jsonl`` and its images, in file order."""
    return _nonempty(iter_pairs(directory, max_image_side=max_image_side,
                                max_image_bytes=max_image_bytes), Path(directory) / PAIRS_FILE)


def iter_pairs(
    directory: Path | str,
    *,
    max_image_side: int = DEFAULT_MAX_IMAGE_SIDE,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> Iterator[PreferencePair]:
    """Yield the pairs of ``directory/pairs.jsonl`` one at a time, each validated as
    :func:`load_pairs` validates it (the import checks its output with this, in bounded memory)."""
    root = _checked_directory(directory)
    path = root / PAIRS_FILE
    for line, record in _records(path):
        fields = {name: _text(record, name, path, line) for name in _PAIR_FIELDS}
        image = _image(root, fields.pop("image"), path, line, max_image_side, max_image_bytes)
        yield PreferencePair(image=image, **fields)


def load_queries(
    directory: Path | str,
    *,
    max_image_side: int = DEFAULT_MAX_IMAGE_SIDE,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> list[Query]:
    """Load and validate ``directory/queries.jsonl`` and its images, in file order.

    Besides the text fields ``id``, ``image``, ``prompt``, ``category``, a query may carry
    ``answer`` (string or null) and ``options`` (list of strings, containing the answer).
    """
    return _nonempty(iter_queries(directory, max_image_side=max_image_side,
                                  max_image_bytes=max_image_bytes), Path(directory) / QUERIES_FILE)


def iter_queries(
    directory: Path | str,
    *,
    max_image_side: int = DEFAULT_MAX_IMAGE_SIDE,
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
) -> Iterator[Query]:
    """Yield the queries of ``directory/queries.jsonl`` one at a time, validated as
    :func:`load_queries` validates them."""
    root = _checked_directory(directory)
    path = root / QUERIES_FILE
    for line, record in _records(path):
        fields = {name: _text(record, name, path, line) for name in _QUERY_FIELDS}
        options = _options(record, path, line)
        answer = _answer(record, options, path, line)
        image = _image(root, fields.pop("image"), path, line, max_image_side, max_image_bytes)
        yield Query(image=image, answer=answer, options=options, **fields)
