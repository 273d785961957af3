"""``HashingEncoder``: a small, fixed, fully deterministic public encoder.

Image tokens are a fixed random projection of pooled pixel patches; text tokens are fixed random
embeddings of hashed words plus a prompt/response segment vector. No weights to download, so it
serves fast tests and federations that prefer a public encoder with no model behind it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from sdk.router._encoder import (
    EncodedBatch,
    ImageFeatureCache,
    check_triples,
    image_key,
    open_image,
)
from sdk.wire import ImageRef
from sdk.wire._router_config import HashingEncoderConfig

__all__ = ["HashingEncoder", "HashingEncoderConfig"]

_WORD = re.compile(r"\w+|[^\w\s]")


class HashingEncoder:
    """Deterministic public encoder; satisfies the :class:`~sdk.router.Encoder` protocol."""

    def __init__(self, config: HashingEncoderConfig | None = None) -> None:
        self.config = config or HashingEncoderConfig()
        c = self.config
        gen = torch.Generator().manual_seed(c.seed)
        patch_in = 3 * c.patch_size * c.patch_size
        # Fixed tables; scaled so every token has norm ~1.
        self._patch_proj = torch.randn(patch_in, c.dim, generator=gen) / np.sqrt(patch_in)
        self._words = torch.randn(c.num_buckets, c.dim, generator=gen) / np.sqrt(c.dim)
        self._segments = torch.randn(3, c.dim, generator=gen) / np.sqrt(c.dim)  # image/prompt/resp
        digest = hashlib.sha256(c.model_dump_json().encode()).hexdigest()[:16]
        self._encoder_id = f"hashing-encoder-v1:{digest}"
        self.image_cache = ImageFeatureCache()

    @property
    def dim(self) -> int:
        """Feature size D."""
        return self.config.dim

    @property
    def encoder_id(self) -> str:
        """Fingerprint of the configuration (the 'public model')."""
        return self._encoder_id

    def _bucket(self, word: str) -> int:
        h = hashlib.sha256(f"{self.config.seed}:{word}".encode()).digest()
        return int.from_bytes(h[:8], "little") % self.config.num_buckets

    def _text_tokens(self, text: str, segment: int, keep: int, last: bool) -> Tensor:
        words = _WORD.findall(text.lower())
        words = words[-keep:] if last else words[:keep]
        if not words:
            return torch.zeros(0, self.dim)
        idx = torch.tensor([self._bucket(w) for w in words])
        return self._words[idx] + self._segments[segment]  # (n, D)

    def _image_tokens(self, image: Image.Image | ImageRef) -> Tensor:
        key = image_key(image)
        cached = self.image_cache.get(key)
        if cached is not None:
            return cached
        g, p = self.config.image_grid, self.config.patch_size
        side = g * p
        pixels = np.asarray(open_image(image).convert("RGB").resize((side, side), Image.Resampling.BILINEAR))
        x = torch.from_numpy(pixels.astype(np.float32) / 255.0 - 0.5)  # (side, side, 3)
        # (g, p, g, p, 3) -> (g, g, p, p, 3) -> (g*g, p*p*3)
        patches = x.reshape(g, p, g, p, 3).permute(0, 2, 1, 3, 4).reshape(g * g, p * p * 3)
        tokens = patches @ self._patch_proj + self._segments[0]  # (g*g, D)
        self.image_cache.put(key, tokens)
        return tokens

    def encode(
        self,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> EncodedBatch:
        """Encode B triples; sequences are [image tokens, first prompt words, last response words].
        A reference is decoded once, when its sha256 is not in ``image_cache``."""
        check_triples(images, prompts, responses)
        c = self.config
        rows = []
        for image, prompt, response in zip(images, prompts, responses, strict=True):
            parts = [
                torch.zeros(0, c.dim) if image is None else self._image_tokens(image),
                self._text_tokens(prompt, 1, c.max_prompt_tokens, last=False),
                self._text_tokens(response, 2, c.max_response_tokens, last=True),
            ]
            rows.append(torch.cat(parts))
        t_max = max(1, *(r.shape[0] for r in rows))
        hidden = torch.zeros(len(rows), t_max, c.dim)
        mask = torch.zeros(len(rows), t_max, dtype=torch.bool)
        for i, r in enumerate(rows):
            hidden[i, : r.shape[0]] = r
            mask[i, : r.shape[0]] = True
        return EncodedBatch(hidden=hidden, mask=mask)
