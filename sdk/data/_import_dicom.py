"""DICOM pixel data to RGB frames with pydicom: pixels only, never a header value.

Windowing, in order: the file's VOI LUT Sequence (pydicom's ``apply_voi_lut``), else its first
Window Center / Window Width (the DICOM linear function), else the frame's own minimum to
maximum. Modality rescaling (slope, intercept) comes first and MONOCHROME1 is inverted, so bright
always means dense. Errors say what is wrong with the file in fixed words; they quote no tag value.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
from PIL import Image

from sdk.data._import_config import ImportConfig

__all__ = ["dicom_frames", "is_dicom"]


def is_dicom(data: bytes, label: str) -> bool:
    """A DICOM file by its name (``.dcm``) or by its preamble (``DICM`` at byte 128)."""
    return label.lower().endswith(".dcm") or data[128:132] == b"DICM"


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
    from pydicom.pixels import apply_modality_lut

    if frame.ndim == 3:  # colour (RGB after pydicom's YBR conversion): scale to 8 bits
        bits = int(dataset.get("BitsStored", 8))
        scaled = frame.astype(np.float64) * (255.0 / (2**bits - 1))
        return Image.fromarray(np.clip(scaled, 0, 255).astype(np.uint8), mode="RGB")
    unit = _window(apply_modality_lut(frame, dataset), dataset)
    if str(dataset.get("PhotometricInterpretation", "")) == "MONOCHROME1":
        unit = 1.0 - unit
    grey = np.round(unit * 255.0).astype(np.uint8)
    return Image.fromarray(grey, mode="L").convert("RGB")


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
        plugins = "; ".join(decoder.missing_dependencies)
        raise ValueError(
            f"transfer syntax {syntax.name} needs a pixel-data plugin: install one of: {plugins}"
        )


def dicom_frames(data: bytes, config: ImportConfig) -> list[Image.Image]:
    """The kept frames of a DICOM file as RGB images (``ValueError`` with a fixed reason).

    pydicom's value validation is off and its warnings silenced meanwhile: they quote the
    offending tag value (``Invalid value for VR DA: '...'``), which would put it in a log.
    """
    from pydicom import config as dicom_config

    previous = dicom_config.settings.reading_validation_mode
    dicom_config.settings.reading_validation_mode = dicom_config.IGNORE
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _frames(data, config)
    finally:
        dicom_config.settings.reading_validation_mode = previous


def _frames(data: bytes, config: ImportConfig) -> list[Image.Image]:
    import pydicom
    from pydicom.errors import InvalidDicomError

    try:
        dataset = pydicom.dcmread(io.BytesIO(data))
    except (InvalidDicomError, OSError, ValueError, EOFError) as exc:
        raise ValueError(f"is not a readable DICOM file ({type(exc).__name__})") from exc
    if "PixelData" not in dataset:
        raise ValueError("holds no pixel data")
    burned = str(dataset.get("BurnedInAnnotation", "")).strip().upper()
    if burned == "YES" and not config.allow_burned_in:
        raise ValueError(
            "BurnedInAnnotation is YES (text in the pixels may identify the patient); "
            "refused unless allow_burned_in (--allow-burned-in) is set"
        )
    _check_decodable(dataset)
    try:
        pixels = dataset.pixel_array
    except (RuntimeError, ValueError, NotImplementedError, AttributeError) as exc:
        raise ValueError(f"pixel data is unreadable ({type(exc).__name__})") from exc
    count = int(dataset.get("NumberOfFrames", 1) or 1)
    frames = list(pixels) if count > 1 else [pixels]
    if config.dicom_frame is not None:
        if config.dicom_frame >= len(frames):
            raise ValueError(f"has {len(frames)} frames; frame {config.dicom_frame} asked for")
        frames = [frames[config.dicom_frame]]
    return [_to_rgb(np.asarray(frame), dataset) for frame in frames]
