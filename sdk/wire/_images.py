"""Images on the wire are content-addressed: the bytes travel once with their sha256, then the
hash alone. One reference type (:class:`ImageRef`), one check of sent bytes against their hash
(:func:`image_bytes`) and one bounded cache by hash (:class:`ImageCache`) serve the aligner, the
server and the member."""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sdk.wire._schemas import PayloadError

__all__ = ["ImageCache", "ImageRef", "image_bytes"]

V = TypeVar("V")


def image_bytes(image_sha256: str, image_b64: str) -> bytes:
    """The bytes of a sent image, decoded from base64 and checked against the hash they were
    sent under; ``PayloadError`` (422) naming the image otherwise: a cache keyed by hash must
    never hold bytes under another image's name."""
    try:
        data = base64.b64decode(image_b64, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError(f"image {image_sha256[:12]}: image_b64 is not base64") from None
    if hashlib.sha256(data).hexdigest() != image_sha256:
        raise PayloadError(f"image {image_sha256[:12]}: the bytes do not hash to "
                           "image_sha256")
    return data


@dataclass(frozen=True)
class ImageRef:
    """One image as it travels from the aligner to the member: its encoded file's bytes (PNG,
    JPEG, whatever the aligner made) and their sha256. Made once from bytes (:meth:`of`) or
    from sent bytes checked against their hash (:meth:`sent`), then passed on unchanged, so
    the member scores exactly the file the aligner sent."""

    sha256: str
    data: bytes = field(repr=False, compare=False)

    @classmethod
    def of(cls, data: bytes) -> ImageRef:
        """The reference to ``data``, hashed here once."""
        return cls(hashlib.sha256(data).hexdigest(), data)

    @classmethod
    def sent(cls, image_sha256: str, image_b64: str) -> ImageRef:
        """The reference to bytes that arrived as base64 under ``image_sha256``, checked by
        :func:`image_bytes` (``PayloadError`` when they do not match)."""
        return cls(image_sha256, image_bytes(image_sha256, image_b64))

    def b64(self) -> str:
        """The bytes as base64, for an item's ``image_b64``."""
        return base64.b64encode(self.data).decode()


class ImageCache(Generic[V]):
    """Values (bytes, decoded images) by image hash, the least recently used out first,
    bounded by ``max_items`` and by ``max_bytes`` as ``size_of`` counts them; a value larger
    than ``max_bytes`` alone is never kept, since it would evict everything else. Safe to
    share between threads."""

    def __init__(self, *, max_items: int | None = None, max_bytes: int | None = None,
                 size_of: Callable[[V], int] | None = None) -> None:
        if max_bytes is not None and size_of is None:
            raise ValueError("an ImageCache bounded by bytes needs size_of")
        self.max_items, self.max_bytes = max_items, max_bytes
        self._size_of = size_of
        self._values: OrderedDict[str, V] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    @property
    def bytes(self) -> int:
        """The kept values' total size (0 without ``size_of``)."""
        return self._bytes

    def values(self) -> list[V]:
        """The kept values, least recently used first."""
        with self._lock:
            return list(self._values.values())

    def get(self, digest: str) -> V | None:
        """The value kept under ``digest`` (now the most recently used), or None."""
        with self._lock:
            value = self._values.get(digest)
            if value is not None:
                self._values.move_to_end(digest)
            return value

    def put(self, digest: str, value: V) -> None:
        """Keep ``value`` under ``digest`` (a hash names one content: a kept value stays),
        then drop the least recently used ones over the bounds."""
        size = 0 if self._size_of is None else self._size_of(value)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        with self._lock:
            if digest in self._values:
                self._values.move_to_end(digest)
                return
            self._values[digest] = value
            self._bytes += size
            while (self.max_items is not None and len(self._values) > self.max_items) or (
                    self.max_bytes is not None and self._bytes > self.max_bytes):
                _, old = self._values.popitem(last=False)
                self._bytes -= 0 if self._size_of is None else self._size_of(old)
