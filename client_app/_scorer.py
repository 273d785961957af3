"""A deterministic demo scorer, and loading a scorer by name (the interface it fits,
``Scorer``, is the reward service's)."""

from __future__ import annotations

import hashlib
import importlib

from PIL import Image

__all__ = ["HashScorer", "load_object"]


class HashScorer:
    """A deterministic stand-in reward: a function of the pixels, prompt and response.

    For demos and tests where no trained reward model is present; scores lie in [-1, 1].
    """

    clip = 1.0  # the bound c of its scores, as a trained scorer's normalizer declares its own
    # A model input size, as a real scorer's processor declares one: demo sites then resize
    # large images exactly as a real site does.
    input_pixels: int | None = 448 * 448

    def score(self, images: list[Image.Image], prompts: list[str],
              responses: list[str]) -> list[float]:
        """Hash each input triple to a number in [-1, 1]."""
        out = []
        for image, prompt, response in zip(images, prompts, responses, strict=True):
            h = hashlib.sha256(image.tobytes() + b"\0" + prompt.encode() + b"\0"
                               + response.encode()).digest()
            out.append(int.from_bytes(h[:4], "little") / 2**31 - 1.0)
        return out


def load_object(spec: str) -> object:
    """Import ``module:attribute``; raise ``ValueError`` naming a bad spec."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:attribute', got {spec!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {spec!r}: {exc}") from exc
