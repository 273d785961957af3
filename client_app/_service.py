"""Reward scoring as a service: the scorer it serves, caller budget and rate limit, image cache,
audit.

One code path serves both push (``POST /v1/reward``) and pull (the runner answering queued
queries).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import threading
import time
from typing import Protocol, runtime_checkable

import numpy as np
from PIL import Image

from client_app._policy import SitePolicy, check_request
from client_app._store import ClientStore
from sdk.data import DEFAULT_MAX_IMAGE_SIDE, fit_to_pixels, open_bounded_image
from sdk.serving import RateLimited
from sdk.wire import (
    ImageCache,
    MissingImages,
    PayloadError,
    RewardRequest,
    RewardResponse,
    image_bytes,
)

__all__ = ["RateLimited", "RewardService", "Scorer"]


@runtime_checkable
class Scorer(Protocol):
    """Anything with ``score(images, prompts, responses) -> list[float]`` (sdk.reward's
    ClientScorer fits). A scorer may also declare ``input_pixels`` (the most pixels of an
    image its model sees) and ``clip`` (the bound of its scores)."""

    def score(self, images: list[Image.Image], prompts: list[str],
              responses: list[str]) -> list[float]:
        """One normalized score per (image, prompt, response)."""
        ...


def _rgb_bytes(image: Image.Image) -> int:
    return image.width * image.height * 3


class _Window:
    """One caller's scored items over the policy's sliding window: (time, items) entries and
    their running total, so a query costs no scan of the audit log."""

    def __init__(self, entries: list[tuple[float, int]]) -> None:
        self.entries: collections.deque[list[float]] = collections.deque(
            [ts, n] for ts, n in entries)
        self.total = sum(n for _, n in entries)

    def trim(self, since: float) -> None:
        while self.entries and self.entries[0][0] < since:
            self.total -= int(self.entries.popleft()[1])


class RewardService:
    """Scores batches for authenticated callers; only the scorer's floats leave, each within
    ``clip`` (the bound the member announces) when the scorer keeps to its own bound."""

    def __init__(self, store: ClientStore, scorer: Scorer, *, clip: float, policy: SitePolicy,
                 rate_per_minute: int, decoded_cache_bytes: int = 256 * 2**20,
                 max_image_side: int = DEFAULT_MAX_IMAGE_SIDE) -> None:
        self.store = store
        self.scorer = scorer
        self.clip = clip
        self.policy = policy
        self.rate_per_minute = rate_per_minute
        self._calls: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque)
        # Items scored (or reserved by a batch being scored) per caller in the budget's window:
        # read from the audit log once, then kept here, so two concurrent batches cannot both
        # pass the budget check.
        self._used: dict[str, _Window] = {}
        # Decoded RGB images by sha256: the same images come back in every GRPO step.
        # Content-addressed, so never stale. Bounded by decoded bytes, not by count: a caller
        # chooses how large its images are.
        self._decoded = ImageCache[Image.Image](max_bytes=decoded_cache_bytes,
                                                size_of=_rgb_bytes)
        self.max_image_side = max_image_side
        # The model's input size (its processor's settings): a larger image is scaled down to
        # it once, here, so neither the cache nor every scoring call holds the full-size one.
        self.input_pixels: int | None = getattr(scorer, "input_pixels", None)
        self._lock = threading.Lock()

    def _admit(self, caller: str, n: int) -> list[float]:
        """Check the rate limit and reserve ``n`` items of the caller's budget; returns the
        reservation (for ``_release``)."""
        with self._lock:
            RateLimited.per_minute(self._calls[caller], self.rate_per_minute, repr(caller))
            wall = time.time()
            since = wall - self.policy.window_s
            window = self._used.get(caller)
            if window is None:
                window = self._used[caller] = _Window(self.store.items_since(caller, since))
            window.trim(since)
            budget = self.policy.reward_budget
            if window.total + n > budget:
                raise RateLimited(f"query budget exhausted for {caller!r}: {window.total} of "
                                  f"{budget} items used in the last {self.policy.reward_window}"
                                  f", {n} more requested")
            reservation = [wall, float(n)]
            window.entries.append(reservation)
            window.total += n
            return reservation

    def _release(self, caller: str, reservation: list[float]) -> None:
        """Give back a reservation whose batch was not scored (nothing was audited)."""
        with self._lock:
            window = self._used[caller]
            with contextlib.suppress(ValueError):  # already out of the window
                window.entries.remove(reservation)
                window.total -= int(reservation[1])

    def _decode(self, sha256: str, data: bytes) -> Image.Image:
        """Decode, scale down to the model's input size and cache one image; its declared
        size is checked before any pixel is decoded."""
        try:
            image = fit_to_pixels(open_bounded_image(io.BytesIO(data), self.max_image_side),
                                  self.input_pixels)
        except ValueError as exc:
            raise PayloadError(f"image {sha256[:12]}… {exc}") from None
        self._decoded.put(sha256, image)
        return image

    def score(self, caller: str, req: RewardRequest) -> RewardResponse | MissingImages:
        """Scores for ``req``, or the image hashes the caller must resend; ``PolicyDenied``
        for a request the site policy refuses, ``RateLimited`` past a limit."""
        check_request(self.policy, [(i.image_sha256, i.prompt) for i in req.items])
        reservation = self._admit(caller, len(req.items))
        try:
            out = self._score(caller, req)
        except BaseException:
            self._release(caller, reservation)
            raise
        if isinstance(out, MissingImages):
            self._release(caller, reservation)
        return out

    def _images(self, req: RewardRequest, raw: dict[str, bytes]
                ) -> list[Image.Image] | MissingImages:
        """The batch's decoded images: those that arrived (``raw``, verified) decode first, so a
        batch with one bad image goes no further; the others come from the caches."""
        arrived = {digest: self._decode(digest, data) for digest, data in raw.items()}
        images: dict[str, Image.Image] = {}
        missing: set[str] = set()
        for item in req.items:
            digest = item.image_sha256
            if digest in images or digest in missing:
                continue
            image = arrived[digest] if digest in arrived else self._decoded.get(digest)
            if image is None:
                blob = raw[digest] if digest in raw else self.store.image(digest)
                if blob is None:
                    missing.add(digest)
                    continue
                image = self._decode(digest, blob)
            images[digest] = image
        if missing:
            return MissingImages(detail="unknown image hash(es); resend their bytes",
                                 missing=sorted(missing))
        return [images[item.image_sha256] for item in req.items]

    def _score(self, caller: str, req: RewardRequest) -> RewardResponse | MissingImages:
        sent = {item.image_sha256: image_bytes(item.image_sha256, item.image_b64)
                for item in req.items if item.image_b64 is not None}
        images = self._images(req, sent)
        # Sent images are kept only for a batch answered or waiting for its missing images
        # (the caller resends only those): a refused batch leaves the store as it was.
        if isinstance(images, MissingImages):
            self.store.put_images(sent)
            return images
        try:
            raw = self.scorer.score(images, [i.prompt for i in req.items],
                                    [i.response for i in req.items])
        except ValueError as exc:  # the reward model refuses the input (empty, too long, ...)
            raise PayloadError(f"cannot score this batch: {exc}") from None
        if len(raw) != len(req.items):
            raise RuntimeError(f"scorer returned {len(raw)} scores for {len(req.items)} items")
        self.store.put_images(sent)
        # A NaN carries no preference: send the neutral 0 rather than leak it. Scores are not
        # clipped here (the scorer's normalizer clipped them once): one outside the announced
        # bound is refused by the server, which fails the item instead of trusting it.
        scores = np.nan_to_num(np.asarray(raw, dtype=np.float64), nan=0.0)
        item_hashes = [hashlib.sha256(json.dumps(
            [i.image_sha256, i.prompt, i.response]).encode()).hexdigest() for i in req.items]
        query_sha = hashlib.sha256("".join(item_hashes).encode()).hexdigest()
        self.store.record_query(caller, query_sha, item_hashes)
        return RewardResponse(scores=[float(s) for s in scores], query_sha256=query_sha)
