"""Turn a source's image value (bytes, a path, a PIL image, a ``datasets`` image dict, or a list
holding one of them) into RGB frames, DICOM included, and encode each frame as a clean PNG.

Every image is re-encoded from its pixels alone: no EXIF, no text chunk, no DICOM header value
reaches the output.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from PIL import Image

from sdk.data._import_config import ImportConfig
from sdk.data._import_dicom import dicom_frames, is_dicom
from sdk.data._import_rows import Row
from sdk.data._loading import contained_path

__all__ = ["encode_png", "frames_of", "load_frames"]

_MAX_SOURCE_BYTES = 512 * 1024 * 1024
"""The largest image file read (a DICOM series can be large, but not unbounded)."""


def _one(value: Any, row: Row, field: str) -> Any:
    """The single image of a list-valued column (the on-disk format holds one per pair)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise row.error(f"field {field!r} holds {len(value)} images; a pair takes exactly one")
        return value[0]
    return value


def _path(relative: str, row: Row, field: str) -> Path:
    """The image file a record names, inside the source folder (the one containment check of
    every source kind; nothing outside is opened)."""
    try:
        path = contained_path(row.base, relative, "the source folder")
    except ValueError as exc:
        raise row.error(f"field {field!r}: image path {relative!r} {exc}") from exc
    if not path.is_file():
        raise row.error(f"image {relative!r} not found (relative to {row.base})")
    if path.stat().st_size > _MAX_SOURCE_BYTES:
        raise row.error(f"image {relative!r} is over {_MAX_SOURCE_BYTES} bytes")
    return path


def _raw(value: Any, row: Row, field: str) -> tuple[bytes | None, Image.Image | None, str]:
    """``(bytes, pil, label)`` of an image value; ``label`` names it in errors (never a DICOM
    header value: a path or ``field``)."""
    if isinstance(value, Image.Image):
        return None, value, field
    if isinstance(value, dict):  # datasets' stored Image: {"bytes": ..., "path": ...}
        if value.get("bytes"):
            return bytes(value["bytes"]), None, str(value.get("path") or field)
        value = value.get("path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None, field
    if isinstance(value, (str, Path)) and str(value).strip():
        return _path(str(value), row, field).read_bytes(), None, str(value)
    raise row.error(f"field {field!r} holds no image (got {type(value).__name__})")


def load_frames(value: Any, row: Row, field: str, config: ImportConfig) -> list[Image.Image]:
    """The RGB frame(s) of ``value``: one for an ordinary image, one per kept DICOM frame."""
    data, pil, label = _raw(_one(value, row, field), row, field)
    if pil is not None:
        return [_fit(pil.convert("RGB"), config)]
    assert data is not None
    if is_dicom(data, label):
        try:
            frames = dicom_frames(data, config)
        except ValueError as exc:
            raise row.error(f"DICOM image {label!r}: {exc}") from exc
        return [_fit(frame, config) for frame in frames]
    try:
        with Image.open(io.BytesIO(data)) as opened:
            return [_fit(opened.convert("RGB"), config)]
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise row.error(f"image {label!r} is unreadable ({exc})") from exc


def frames_of(row: Row, field: str, candidates: tuple[str, ...], config: ImportConfig
              ) -> list[Image.Image]:
    """The frames of the first present image column of ``row``."""
    for name in candidates:
        if row.values.get(name) is not None:
            return load_frames(row.values[name], row, name, config)
    raise row.error(f"missing image column (tried {', '.join(repr(c) for c in candidates)})")


def _fit(image: Image.Image, config: ImportConfig) -> Image.Image:
    """``image`` scaled down (aspect kept) to ``max_image_side`` a side, fresh of metadata."""
    side = config.max_image_side
    if max(image.size) > side:
        image = image.copy()
        image.thumbnail((side, side), Image.Resampling.BICUBIC)
    return Image.frombytes("RGB", image.size, image.tobytes())


def encode_png(image: Image.Image, salt: str) -> tuple[bytes, str]:
    """``(png_bytes, name)``: the PNG holds pixels only; the name is a salted hash of them."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False)
    data = buffer.getvalue()
    digest = hashlib.sha256(salt.encode() + b"\0" + data).hexdigest()[:24]
    return data, f"{digest}.png"
