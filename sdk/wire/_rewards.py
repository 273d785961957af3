"""A reward query on the wire, from the aligner to the server and from the server to a member.

Images are content-addressed: the bytes travel once with their sha256, then the hash alone; one
reference type (:class:`ImageRef`), one check of sent bytes against their hash
(:func:`image_bytes`) and one bounded cache by hash (:class:`ImageCache`) serve the aligner, the
server and the member. The member's item (``RewardItem``) and the aligner's, which extends it;
the batch limits of both hops; the answers (finite scores, or the images to resend); the
aligner's per-step feedback and the service's stats. Which member judged an item stays inside
the server unless the consortium's settings allow it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Generic, TypeVar

from pydantic import Field

from sdk.wire._schemas import _SHA256, PayloadError, _Reply, _Wire

__all__ = [
    "AlignerFeedback",
    "AlignerFeedbackAck",
    "AlignerItem",
    "AlignerRequest",
    "AlignerResponse",
    "AlignerStats",
    "AlignmentStep",
    "ImageCache",
    "ImageRef",
    "MissingImages",
    "PendingQuery",
    "RewardAnswer",
    "RewardItem",
    "RewardRequest",
    "RewardResponse",
    "image_bytes",
]

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


class RewardItem(_Wire):
    """One (image, prompt, response) to score; the image travels once, then by hash."""

    image_sha256: str = Field(pattern=_SHA256)
    image_b64: str | None = Field(default=None, max_length=16_000_000)
    prompt: str = Field(max_length=20_000)
    response: str = Field(max_length=20_000)


class RewardRequest(_Wire):
    """A batch of reward queries, at most :attr:`MAX_ITEMS` items."""

    MAX_ITEMS: ClassVar[int] = 256
    """The most items a member takes in one reward request (push or pull): the server's
    broker splits a larger batch at it, so the aligner's own limit may be larger."""

    items: list[RewardItem] = Field(min_length=1, max_length=MAX_ITEMS)


class RewardResponse(_Reply):
    """Normalized, clipped scores, one per item. Its ``Server-Timing`` header tells the caller
    the milliseconds spent in the member (durations only, never inputs): written by
    :meth:`timing_header`, read by :meth:`timings`."""

    MAX_BYTES: ClassVar[int] = 64 * 1024
    """The most bytes a member's answer to one reward request may hold (its scores, the image
    hashes it lacks, or its refusal, for :attr:`RewardRequest.MAX_ITEMS` items, with room to
    spare): the server's broker reads no more of it."""

    scores: list[Annotated[float, Field(allow_inf_nan=False)]]
    query_sha256: str

    @staticmethod
    def timing_header(**seconds: float) -> str:
        """``score;dur=12.50, app;dur=14.00`` from durations in seconds."""
        return ", ".join(f"{name};dur={s * 1e3:.2f}" for name, s in seconds.items())

    @staticmethod
    def timings(header: str) -> dict[str, float]:
        """``{"score": 12.5, ...}`` (ms) from a ``Server-Timing`` header; an entry without a
        finite ``dur`` is left out (the header is informative, never trusted for anything)."""
        out: dict[str, float] = {}
        for entry in header.split(","):
            name, *params = (part.strip() for part in entry.split(";"))
            for key, _, value in (param.partition("=") for param in params):
                if name and key == "dur":
                    try:
                        dur = float(value)
                    except ValueError:
                        continue
                    if math.isfinite(dur):
                        out[name] = dur
        return out


class RewardAnswer(_Wire):
    """A pull-mode client's answer to one queued query: scores, or the image hashes it lacks."""

    scores: list[Annotated[float, Field(allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=RewardRequest.MAX_ITEMS)
    missing: list[str] = Field(default_factory=list, max_length=RewardRequest.MAX_ITEMS)
    error: str | None = Field(default=None, max_length=1000, description="refusal reason")
    retry_after_s: int | None = Field(default=None, ge=0, le=86_400, description="with "
                                      "``error``: the member refused for load (its rate limit "
                                      "or budget), as a push member's 429 with this "
                                      "Retry-After")


class PendingQuery(_Reply):
    """A queued (pull-mode) reward query for one client."""

    PAGE_BYTES: ClassVar[int] = 32 * 2**20
    """The most bytes of queued items one answer lists before its last query (the oldest is
    always listed): the rest come with the member's next fetch, so the member's bound on an
    answer (its ``max_answer_bytes``) need only hold a page and one query."""

    query_id: int
    items: list[RewardItem]


class MissingImages(_Reply):
    """409 from a client app: resend these images' bytes."""

    detail: str
    missing: list[str]


class AlignerItem(RewardItem):
    """One completion to reward: the member's :class:`~sdk.wire.RewardItem` (the image by
    content hash, its bytes only when the server answered that it lacks them) and the
    prompt's options, which the server's format rule reads and no member receives."""

    options: list[str] = Field(default_factory=list, max_length=26,
                               description="a multiple-choice prompt's options (the format "
                               "rule); empty for an open prompt")


class AlignerRequest(_Wire):
    """A batch of completions and the reward-selection method to apply."""

    MAX_ITEMS: ClassVar[int] = 1024
    """The most items the server's ``[alignment] max_items`` may allow per request; above a
    member's :attr:`~sdk.wire.RewardRequest.MAX_ITEMS` the broker splits the batch."""

    items: list[AlignerItem] = Field(min_length=1, max_length=MAX_ITEMS)
    method: str = Field(default="mor", pattern=r"^[a-z_]{1,40}$",
                        description="a registered selection of sdk.alignment")
    step: int = Field(default=0, ge=0, le=2**40, description="the trainer's global step when "
                      "the batch was generated: feedback for step s covers batches with "
                      "step < s")


class AlignerResponse(_Reply):
    """One normalized, clipped reward per item, or (``missing`` non-empty, ``rewards`` empty)
    the image hashes to resend with their bytes."""

    rewards: list[float] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    failed: int = Field(default=0, description="items given the failure value because their "
                        "member timed out or refused")
    judges: list[str] | None = Field(default=None, description="the member id that scored "
                                     "each item (only if the server's settings allow it; "
                                     "empty string: no member was asked)")
    router_version: int | None = None


class AlignerFeedback(_Wire):
    """The trainer's logged GRPO loss after ``step`` (the online router's bandit feedback)."""

    step: int = Field(ge=0, le=2**40)
    loss: float = Field(allow_inf_nan=False)
    run: str = Field(default="", max_length=64, pattern=r"^[A-Za-z0-9_.:\-]*$",
                     description="the training run: a new run starts its steps and loss "
                     "history afresh (the router keeps what it learned)")
    reward: float | None = Field(default=None, allow_inf_nan=False, description="the step's "
                                 "mean reward as the trainer logged it (progress only)")
    kl: float | None = Field(default=None, allow_inf_nan=False, description="the step's KL to "
                             "the reference policy as the trainer logged it (progress only)")


class AlignerFeedbackAck(_Reply):
    """Whether the feedback was applied (once per step: another rank's copy is not)."""

    step: int
    applied: bool
    feedback: float | None = Field(description="r_t: 1 when the loss did not rise, 0 when it "
                                   "did, null without a previous loss")
    pairs: int = Field(description="routed (context, member) pairs the update used")


class AlignerStats(_Reply):
    """Counters of the reward service since the server started (the online state: persisted)."""

    batches: int = 0
    items: int = 0
    failed: int = 0
    empty: int = 0
    invalid_choices: int = 0
    feedback_applied: int = 0
    step: int | None = None
    last_loss: float | None = None
    router_version: int | None = None
    router_updates: int = 0
    cached_images: int = 0
    member_query_bytes: int = Field(default=0, description="query bytes the server's broker "
                                    "sent to members (push bodies, queued pull items)")
    online_state_sha256: str | None = Field(default=None, description="hash of the saved "
                                            "online router state (head, U, rng)")
    serving_version: int | None = Field(default=None, description="the router version the "
                                        "routed selections use now")
    serving_lineage: int | None = Field(default=None, description="that version's lineage")
    heads: list[str] = Field(default_factory=list, description="that version's heads, in "
                             "order (member names)")
    masked_heads: dict[str, str] = Field(default_factory=dict, description="heads the "
                                         "selection skips now, each with its reason (revoked, "
                                         "not enrolled, not trained in a round yet)")


class AlignmentStep(_Reply):
    """One applied feedback step of the aligner's run (``GET /v1/rewards/progress``): what the
    trainer logged and the bandit feedback the server derived from it."""

    run: str
    step: int
    loss: float
    reward: float | None = None
    kl: float | None = None
    feedback: float | None = Field(default=None, description="r_t of the step (null: no "
                                   "previous loss in the run)")
    at: float = Field(description="when the server applied it (Unix s)")
