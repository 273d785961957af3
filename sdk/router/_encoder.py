"""The frozen public encoder interface: ``h = Enc(x, y)`` as a short, masked token sequence."""

from __future__ import annotations

import hashlib
import io
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from PIL import Image
from torch import Tensor

from sdk.data import open_bounded_image
from sdk.router._errors import RouterShapeError
from sdk.wire import ImageRef, PayloadError

__all__ = [
    "EncodedBatch",
    "Encoder",
    "ImageFeatureCache",
    "concat_batches",
    "image_digest",
    "image_ref",
    "open_image",
]


@dataclass(frozen=True)
class EncodedBatch:
    """Encoder output: ``hidden`` (B, T, D) float and ``mask`` (B, T) bool, True = real token."""

    hidden: Tensor
    mask: Tensor

    def __post_init__(self) -> None:
        if self.hidden.dim() != 3:
            raise RouterShapeError(
                f"hidden must be (B, T, D), got shape {tuple(self.hidden.shape)}"
            )
        if self.mask.shape != self.hidden.shape[:2]:
            raise RouterShapeError(
                f"mask shape {tuple(self.mask.shape)} does not match hidden (B, T) = "
                f"{tuple(self.hidden.shape[:2])}"
            )
        if self.mask.dtype != torch.bool:
            raise RouterShapeError(f"mask must be torch.bool, got {self.mask.dtype}")

    def __len__(self) -> int:
        return int(self.hidden.shape[0])


@runtime_checkable
class Encoder(Protocol):
    """A frozen public model mapping (image, prompt, response) triples to token features.

    Every client of a federation must use the same encoder: ``encoder_id`` is a fingerprint of the
    public model (name and weights hash), stored with the router and checked on load.
    """

    @property
    def dim(self) -> int:
        """Feature size D of ``hidden``."""
        ...

    @property
    def encoder_id(self) -> str:
        """Fingerprint of the public model."""
        ...

    def encode(
        self,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> EncodedBatch:
        """Encode B triples into an :class:`EncodedBatch`; a reference is decoded (by
        :func:`open_image`) only when its features are not cached under its sha256."""
        ...


def check_triples(
    images: Sequence[object], prompts: Sequence[str], responses: Sequence[str]
) -> None:
    """Refuse (image, prompt, response) columns of different lengths."""
    if not len(images) == len(prompts) == len(responses):
        raise RouterShapeError(
            f"images, prompts and responses differ in length: "
            f"{len(images)}, {len(prompts)}, {len(responses)}"
        )


def image_digest(image: Image.Image) -> str:
    """sha256 of an image's mode, size and pixel bytes: the image-feature cache key."""
    h = hashlib.sha256()
    h.update(f"{image.mode}:{image.size[0]}x{image.size[1]}:".encode())
    h.update(image.tobytes())
    return h.hexdigest()


def image_key(image: Image.Image | ImageRef) -> str:
    """The feature-cache key: a reference's sha256 (nothing decoded), a PIL image's
    :func:`image_digest`."""
    return image.sha256 if isinstance(image, ImageRef) else image_digest(image)


def open_image(image: Image.Image | ImageRef) -> Image.Image:
    """The pixels of ``image``: a PIL image as it is, a reference's bytes decoded as RGB under
    :func:`~sdk.data.open_bounded_image`'s size bound; bytes that are no image are the
    sender's error (``PayloadError``, a 422 on the server)."""
    if not isinstance(image, ImageRef):
        return image
    try:
        return open_bounded_image(io.BytesIO(image.data))
    except ValueError as exc:
        raise PayloadError(f"image {image.sha256[:12]} {exc}") from None


def image_ref(image: Image.Image | ImageRef) -> ImageRef:
    """A reference to ``image``: itself, or a PIL image encoded once as RGB PNG (what an
    aligner holding decoded images sends)."""
    if isinstance(image, ImageRef):
        return image
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")
    return ImageRef.of(buf.getvalue())


class ImageFeatureCache:
    """LRU cache of image features keyed by content hash, so an image shared by M responses is
    encoded once. Counts hits and misses for tests and logs."""

    def __init__(self, max_items: int = 4096) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.max_items = max_items
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, Tensor] = OrderedDict()

    def get(self, key: str) -> Tensor | None:
        """Return the cached features for ``key`` (and count a hit), else None (a miss)."""
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: str, value: Tensor) -> None:
        """Store ``value``, evicting the least recently used item when full."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def concat_batches(batches: Sequence[EncodedBatch]) -> EncodedBatch:
    """Stack batches along B, right-padding T with masked zeros to the longest batch."""
    if not batches:
        raise RouterShapeError("concat_batches needs at least one batch")
    dims = {b.hidden.shape[2] for b in batches}
    if len(dims) != 1:
        raise RouterShapeError(f"batches disagree on feature size D: {sorted(dims)}")
    t_max = max(b.hidden.shape[1] for b in batches)
    hidden, mask = [], []
    for b in batches:
        pad = t_max - b.hidden.shape[1]
        hidden.append(torch.nn.functional.pad(b.hidden, (0, 0, 0, pad)))
        mask.append(torch.nn.functional.pad(b.mask, (0, pad), value=False))
    return EncodedBatch(hidden=torch.cat(hidden), mask=torch.cat(mask))
