"""``BrokerRewardSource``: the reward source over the server's REST reward-query broker.

sdk must not import server_app, so the broker is seen through a small protocol and the item type
is injected (``server_app.QueryItem``). Images are PNG-encoded once per distinct image (content
hash) and the broker's own content-addressed cache keeps them off the wire after the first send.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from PIL import Image

from sdk.alignment._errors import RewardShapeError
from sdk.alignment._reward_source import check_client_index, check_lengths
from sdk.router import image_digest
from sdk.wire import ImageCache

__all__ = ["BrokerRewardSource", "PngCache", "RewardQueryBroker"]


class PngCache:
    """PNG bytes of images, encoded once per distinct image (content hash of the pixels) and
    kept for the ``max_items`` most recently used: GRPO sends one image with M completions."""

    def __init__(self, max_items: int = 4096) -> None:
        self._png = ImageCache[bytes](max_items=max_items)

    def encode(self, image: Image.Image | None) -> bytes:
        """The image as RGB PNG bytes; an item without an image cannot go over REST."""
        if image is None:
            raise RewardShapeError("the REST reward path needs an image for every query")
        key = image_digest(image)
        data = self._png.get(key)
        if data is None:
            buf = io.BytesIO()
            image.convert("RGB").save(buf, format="PNG")
            data = buf.getvalue()
            self._png.put(key, data)
        return data


class RewardQueryBroker(Protocol):
    """What the server app's ``RewardBroker`` offers."""

    async def query(self, client_id: str, items: list[Any]) -> list[float]:
        """Scores of ``items`` from ``client_id``."""
        ...


class BrokerRewardSource:
    """A :class:`~sdk.alignment.RewardSource` whose client k is ``client_ids[k]`` at the broker.

    ``make_item(image_bytes, prompt, response)`` builds the broker's item (``QueryItem``).
    """

    def __init__(
        self,
        broker: RewardQueryBroker,
        client_ids: Sequence[str],
        make_item: Callable[[bytes, str, str], Any],
        *,
        max_cached_images: int = 4096,
    ) -> None:
        if not client_ids:
            raise ValueError("BrokerRewardSource needs at least one client id")
        self.broker = broker
        self.client_ids = list(client_ids)
        self.make_item = make_item
        self._png = PngCache(max_cached_images)

    @property
    def num_clients(self) -> int:
        """Number of clients K."""
        return len(self.client_ids)

    async def score(
        self,
        client_index: int,
        images: Sequence[Image.Image | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> list[float]:
        """Ask client ``client_ids[client_index]`` through the broker."""
        n = check_lengths(images, prompts, responses)
        check_client_index(client_index, len(self.client_ids))
        items = [self.make_item(self._png.encode(i), p, r)
                 for i, p, r in zip(images, prompts, responses, strict=True)]
        scores = [float(s) for s in await self.broker.query(self.client_ids[client_index], items)]
        if len(scores) != n:
            raise RewardShapeError(
                f"client {self.client_ids[client_index]!r} returned {len(scores)} scores for {n}"
            )
        return scores
