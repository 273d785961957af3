"""A round's stage message on the wire: its two forms, its error, and the vector encoding.

A stage message is a JSON object or, for bulk vectors, the raw bytes of an
``application/octet-stream`` body; a malformed one is a ``PayloadError`` (HTTP 422) that names
the stage and the reason. The round kinds (``sdk.rounds``) choose the form per stage.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

__all__ = ["PayloadError", "StagePayload", "decode_vector", "encode_vector"]


StagePayload = dict[str, Any] | bytes
"""A stage message on the wire: a JSON object, or the raw bytes of an octet-stream body."""


class PayloadError(ValueError):
    """A stage message is malformed or illegal (HTTP 422); names the stage and the reason."""


def encode_vector(vector: np.ndarray) -> str:
    """float32 little-endian bytes, base64."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()


def decode_vector(text: object, length: int, *, what: str = "vector") -> np.ndarray:
    """Inverse of ``encode_vector``; checks the length and finiteness. Returns (length,) float32."""
    if not isinstance(text, str):
        raise PayloadError(f"{what} must be a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError(f"{what} is not base64") from None
    if len(raw) != 4 * length:
        raise PayloadError(f"{what} has {len(raw) // 4} float32 values, expected {length}")
    vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vec)):
        raise PayloadError(f"{what} contains NaN or infinity")
    return vec
