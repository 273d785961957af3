"""The suite's one test image: a PNG of seeded noise, so two seeds give two distinct images
(and two sha256s) and the same seed the same bytes in every test."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

__all__ = ["png"]


def png(side: int = 32, seed: int = 0) -> bytes:
    """A ``side`` x ``side`` RGB PNG of noise drawn from ``seed``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()
