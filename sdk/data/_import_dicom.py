"""DICOM pixel data to RGB frames with pydicom: pixels only, never a header value.

Frames are decoded one at a time as they are iterated (``pydicom.pixels.iter_pixels`` on the
file), so a file of thousands of frames costs one frame's memory. Windowing, in order: the
file's VOI LUT Sequence (pydicom's ``apply_voi_lut``), else its first Window Center / Window
Width (the DICOM linear function), else the frame's own minimum to maximum. Modality rescaling
(slope, intercept) comes first and MONOCHROME1 is inverted, so bright always means dense;
PALETTE COLOR goes through the file's colour lookup table. Errors say what is wrong with the
file in fixed words or pydicom's decoder's reason; they quote no tag value.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
from PIL import Image

from sdk.data._import_config import ImportConfig

__all__ = ["DicomFrames", "is_dicom"]

_PREAMBLE = 132
"""Bytes up to and including the ``DICM`` marker."""


def is_dicom(head: bytes, label: str) -> bool:
    """A DICOM file by its name (``.dcm``) or by its preamble (``DICM`` at byte 128 of
    ``head``, the file's first bytes)."""
    return label.lower().endswith(".dcm") or head[128:_PREAMBLE] == b"DICM"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """pydicom's value validation off and its warnings silenced: they quote the offending tag
    value (``Invalid value for VR DA: '...'``), which would put it in a log."""
    from pydicom import config as dicom_config

    previous = dicom_config.settings.reading_validation_mode
    dicom_config.settings.reading_validation_mode = dicom_config.IGNORE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        dicom_config.settings.reading_validation_mode = previous


def _first(dataset: Any, keyword: str) -> float | None:
    """The first value of a numeric (possibly multi-valued or empty) tag, or ``None``."""
    value = dataset.get(keyword)
    if value is None or value == "":
        return None
    values = np.ravel([value])
    return float(values[0]) if values.size else None


def _window(frame: np.ndarray, dataset: Any) -> np.ndarray:
    """``frame`` (modality values) mapped to [0, 1] by the rule in the module docstring."""
    from pydicom.pixels import apply_voi_lut

    values = frame.astype(np.float64)
    center, width = _first(dataset, "WindowCenter"), _first(dataset, "WindowWidth")
    if dataset.get("VOILUTSequence"):
        values = apply_voi_lut(frame, dataset).astype(np.float64)
    elif center is not None and width is not None:
        width = max(width, 1.0)
        # DICOM PS3.3 C.11.2.1.2.1, linear: the window's edges map to black and white.
        scaled = ((values - (center - 0.5)) / (width - 1.0) + 0.5) if width > 1 else values - center
        return np.clip(scaled, 0.0, 1.0)
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


def _to_rgb(frame: np.ndarray, dataset: Any) -> Image.Image:
    from pydicom.pixels import apply_color_lut, apply_modality_lut

    photometric = str(dataset.get("PhotometricInterpretation", "")).strip()
    if photometric == "PALETTE COLOR" and frame.ndim == 2:
        # The lookup table's entries are 8 or 16 bits, as its dtype says.
        colour = apply_color_lut(frame, dataset)
        top = 255.0 if colour.dtype == np.uint8 else 65535.0
        return Image.fromarray(np.round(colour * (255.0 / top)).astype(np.uint8), mode="RGB")
    if frame.ndim == 3:  # colour (RGB after pydicom's YBR conversion): scale to 8 bits
        bits = int(dataset.get("BitsStored", 8))
        scaled = frame.astype(np.float64) * (255.0 / (2**bits - 1))
        return Image.fromarray(np.clip(scaled, 0, 255).astype(np.uint8), mode="RGB")
    unit = _window(apply_modality_lut(frame, dataset), dataset)
    if photometric == "MONOCHROME1":
        unit = 1.0 - unit
    grey = np.round(unit * 255.0).astype(np.uint8)
    return Image.fromarray(grey, mode="L").convert("RGB")


def _plugins(dataset: Any) -> str:
    """The pixel-data plugins that could decode the file's transfer syntax but are missing."""
    from pydicom.pixels import get_decoder

    syntax = dataset.file_meta.get("TransferSyntaxUID")
    if syntax is None or not syntax.is_compressed:
        return ""
    try:
        return "; ".join(get_decoder(syntax).missing_dependencies)
    except NotImplementedError:
        return ""


def _check_decodable(dataset: Any) -> None:
    """Refuse a compressed transfer syntax no installed plugin decodes, naming the plugins."""
    from pydicom.pixels import get_decoder

    syntax = dataset.file_meta.get("TransferSyntaxUID")
    if syntax is None or not syntax.is_compressed:
        return
    try:
        decoder = get_decoder(syntax)
    except NotImplementedError as exc:
        raise ValueError(f"transfer syntax {syntax.name} is not supported by pydicom") from exc
    if not decoder.is_available:
        raise ValueError(f"transfer syntax {syntax.name} needs a pixel-data plugin: "
                         f"install one of: {_plugins(dataset)}")


def _undecodable(dataset: Any, exc: BaseException) -> ValueError:
    """pydicom's reason a frame did not decode, and the plugins that might decode it."""
    reason = re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__
    plugins = _plugins(dataset)
    hint = f"; another pixel-data plugin may decode it: install one of: {plugins}" if plugins \
        else ""
    return ValueError(f"pixel data cannot be decoded ({reason}){hint}")


def _whole(dataset: Any, keyword: str, default: int) -> int:
    """A whole-number tag, ``default`` when absent or empty; ``ValueError`` naming the tag but
    not its value (a malformed value may be any text, an identifying one included)."""
    value = dataset.get(keyword)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"tag {keyword} is not a whole number") from None


def _checked_header(dataset: Any, config: ImportConfig) -> int:
    """The file's frame count, once its header passed the import's rules (pixel data present,
    no burned-in annotation unless allowed, a decodable syntax, frames within
    ``max_source_pixels``, the chosen frame present); ``ValueError`` in fixed words."""
    if "PixelData" not in dataset:
        raise ValueError("holds no pixel data")
    burned = str(dataset.get("BurnedInAnnotation", "")).strip().upper()
    if burned == "YES" and not config.allow_burned_in:
        raise ValueError(
            "BurnedInAnnotation is YES (text in the pixels may identify the patient); "
            "refused unless allow_burned_in (--allow-burned-in) is set"
        )
    _check_decodable(dataset)
    pixels = _whole(dataset, "Rows", 0) * _whole(dataset, "Columns", 0)
    if pixels > config.max_source_pixels:
        raise ValueError(f"frames of {pixels} pixels are over the limit of "
                         f"{config.max_source_pixels} (max_source_pixels)")
    count = _whole(dataset, "NumberOfFrames", 1) or 1
    if count < 1:
        raise ValueError("tag NumberOfFrames is not a positive number")
    if config.dicom_frame is not None and config.dicom_frame >= count:
        raise ValueError(f"has {count} frames; frame {config.dicom_frame} asked for")
    return count


class DicomFrames:
    """The kept frames of one DICOM file: the header is read and checked on construction
    (``ValueError`` with a fixed reason), the pixels frame by frame as the object is iterated."""

    def __init__(self, source: bytes | Path, config: ImportConfig) -> None:
        import pydicom
        from pydicom.errors import InvalidDicomError

        self._source = source
        try:
            with _quiet(), self._open() as handle:
                # PixelData stays on disk: only the header is read here.
                dataset = pydicom.dcmread(handle, defer_size="1 MB")
        except (InvalidDicomError, OSError, ValueError, EOFError) as exc:
            raise ValueError(f"is not a readable DICOM file ({type(exc).__name__})") from exc
        with _quiet():  # every header value is read without pydicom quoting it
            count = _checked_header(dataset, config)
        self._dataset = dataset
        # A range, not a list: the frame count is the header's claim, checked against the
        # pixel data only as frames are decoded, so no memory may be sized by it.
        self._indices = range(config.dicom_frame, config.dicom_frame + 1) \
            if config.dicom_frame is not None else range(count)

    def _open(self) -> BinaryIO:
        source = self._source
        return io.BytesIO(source) if isinstance(source, bytes) else source.open("rb")

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self) -> Iterator[Image.Image]:
        from pydicom.pixels import iter_pixels

        # Closed while the file is open: a generator left to the collector seeks a closed file
        # (pydicom declares an Iterator; it is a generator).
        with self._open() as handle, contextlib.closing(cast(
                "Generator[np.ndarray, None, None]",
                iter_pixels(handle, indices=self._indices))) as frames:
            while True:
                with _quiet():
                    try:
                        frame = next(frames)
                    except StopIteration:
                        return
                    except (RuntimeError, ValueError, NotImplementedError, AttributeError,
                            TypeError, KeyError) as exc:
                        raise _undecodable(self._dataset, exc) from exc
                    try:
                        image = _to_rgb(np.asarray(frame), self._dataset)
                    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
                        # The error would quote the malformed value: fixed words, no cause.
                        raise ValueError("a rescale, window, lookup-table or bits value is "
                                         "malformed: the frame cannot be made an image"
                                         ) from None
                yield image
