"""Turn a source's image value (bytes, a path, a PIL image, a ``datasets`` image dict, or a list
holding one of them) into RGB frames, DICOM included, and encode each frame as a clean PNG.

Every image is re-encoded from its pixels alone: no EXIF, no text chunk, no DICOM header value
reaches the output. A path is opened only inside the source folder; a source image over
``ImportConfig.max_source_bytes`` or ``max_source_pixels`` is refused before it is decoded.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from sdk.data._import_config import ImportConfig
from sdk.data._import_dicom import DicomFrames, is_dicom
from sdk.data._import_rows import Row, is_missing
from sdk.data._loading import contained_path

__all__ = ["Frames", "encode_png", "frames_of", "load_frames"]


class Frames:
    """The frames of one image value, each decoded and scaled to ``max_image_side`` only as it
    is iterated (a multi-frame DICOM file holds thousands); a frame that fails to decode raises
    its record's error."""

    def __init__(self, count: int, frames: Iterable[Image.Image], row: Row, label: str,
                 config: ImportConfig) -> None:
        self._count = count
        self._frames = frames
        self._row = row
        self._label = label
        self._config = config

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Image.Image]:
        try:
            for frame in self._frames:
                yield _fit(_masked(frame, self._config.mask_border), self._config)
        except ValueError as exc:
            raise self._row.error(f"DICOM image {self._label!r}: {exc}") from exc


def _one(value: Any, row: Row, field: str) -> Any:
    """The single image of a list-valued column (the on-disk format holds one per pair)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise row.error(f"field {field!r} holds {len(value)} images; a pair takes exactly one")
        return value[0]
    return value


def _path(relative: str, row: Row, field: str, config: ImportConfig) -> Path:
    """The image file a record names, inside the source folder (the one containment check of
    every source kind; nothing outside is opened)."""
    try:
        path = contained_path(row.base, relative, "the source folder")
    except ValueError as exc:
        raise row.error(f"field {field!r}: image path {relative!r} {exc}") from exc
    if not path.is_file():
        raise row.error(f"image {relative!r} not found (relative to {row.base})")
    size = path.stat().st_size
    if size > config.max_source_bytes:
        raise row.error(f"image {relative!r} is {size} bytes, over the limit of "
                        f"{config.max_source_bytes} (max_source_bytes)")
    return path


def _raw(value: Any, row: Row, field: str, config: ImportConfig
         ) -> tuple[bytes | Path | None, Image.Image | None, str]:
    """``(bytes or path, pil, label)`` of an image value; ``label`` names it in errors (never a
    DICOM header value: a path or ``field``)."""
    if isinstance(value, Image.Image):
        return None, value, field
    label = field
    if isinstance(value, dict):  # datasets' stored Image: {"bytes": ..., "path": ...}
        if value.get("bytes"):
            value, label = value["bytes"], str(value.get("path") or field)
        else:
            value = value.get("path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) > config.max_source_bytes:
            raise row.error(f"image {label!r} is {len(value)} bytes, over the limit of "
                            f"{config.max_source_bytes} (max_source_bytes)")
        return bytes(value), None, label
    if isinstance(value, (str, Path)) and str(value).strip():
        return _path(str(value), row, field, config), None, str(value)
    raise row.error(f"field {field!r} holds no image (got {type(value).__name__})")


def _head(source: bytes | Path) -> bytes:
    if isinstance(source, bytes):
        return source[:132]
    with source.open("rb") as handle:
        return handle.read(132)


def _decode(source: bytes | Path, row: Row, label: str, config: ImportConfig) -> Image.Image:
    """An ordinary image as RGB, its declared size checked against ``max_source_pixels``
    before its pixels are decoded (in place of Pillow's bomb warning)."""
    limit = f"over the limit of {config.max_source_pixels} pixels (max_source_pixels)"
    try:
        with warnings.catch_warnings():  # the size is checked below, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    except Image.DecompressionBombError as exc:  # Pillow's hard limit, far above ours
        raise row.error(f"image {label!r} declares too many pixels, {limit}") from exc
    except (OSError, ValueError) as exc:
        raise row.error(f"image {label!r} is unreadable ({exc})") from exc
    with opened:
        width, height = opened.size  # from the header, before the pixels are decoded
        if width * height > config.max_source_pixels:
            raise row.error(f"image {label!r} is {width}x{height}, {limit}")
        try:
            return opened.convert("RGB")
        except (OSError, ValueError) as exc:
            raise row.error(f"image {label!r} is unreadable ({exc})") from exc


def load_frames(value: Any, row: Row, field: str, config: ImportConfig) -> Frames:
    """The RGB frame(s) of ``value``: one for an ordinary image, one per kept DICOM frame."""
    source, pil, label = _raw(_one(value, row, field), row, field, config)
    if pil is not None:
        return Frames(1, [pil.convert("RGB")], row, label, config)
    assert source is not None
    if is_dicom(_head(source), label):
        try:
            dicom = DicomFrames(source, config)
        except ValueError as exc:
            raise row.error(f"DICOM image {label!r}: {exc}") from exc
        return Frames(len(dicom), dicom, row, label, config)
    return Frames(1, [_decode(source, row, label, config)], row, label, config)


def frames_of(row: Row, field: str, candidates: tuple[str, ...], config: ImportConfig
              ) -> Frames:
    """The frames of the first present image column of ``row``."""
    for name in candidates:
        if not is_missing(row.values.get(name)):
            return load_frames(row.values[name], row, name, config)
    raise row.error(f"missing image column (tried {', '.join(repr(c) for c in candidates)})")


def _masked(image: Image.Image, border: int) -> Image.Image:
    """``image`` with ``border`` pixels along each edge set to black (a copy; ``0``: itself)."""
    if border <= 0:
        return image
    pixels = np.array(image.convert("RGB"))
    pixels[:border], pixels[-border:], pixels[:, :border], pixels[:, -border:] = 0, 0, 0, 0
    return Image.fromarray(pixels, mode="RGB")


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
