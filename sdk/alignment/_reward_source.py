"""Where rewards come from: one interface, an in-process implementation, and the wrapper that
scores empty completions without a query.

A :class:`RewardSource` answers "client k, score these (image, prompt, response) triples". The
in-process source calls local scorer callables (tests, benchmarks, single-machine runs); the
server's ``BrokerRewardSource`` (``server_app``, over its reward-query broker) moves the same
question over the wire. Strategies only ever see this interface. An image is a PIL image (in one
process) or an :class:`~sdk.wire.ImageRef` (its bytes and sha256, as the aligner sent them).

A sampled policy emits an empty completion whenever it draws EOS first. A client's reward model
refuses an empty response (the client app answers 422), and one refused query would stop GRPO.
An empty answer is never better than any real one, so :class:`EmptyIsWorst` gives it the lowest
score a client can return (``-c`` for normalized, clipped clients) and no client is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from PIL import Image

from sdk.alignment._errors import RewardShapeError
from sdk.router import open_image
from sdk.wire import ImageRef

__all__ = ["EmptyIsWorst", "InProcessRewardSource", "RewardSource", "ScoreFn", "check_lengths"]

ScoreFn = Callable[[Sequence[Image.Image | None], Sequence[str], Sequence[str]], Sequence[float]]
"""A client's scorer: ``(images, prompts, responses) -> one score per triple`` (PIL images:
an :class:`~sdk.wire.ImageRef` is decoded for it)."""


def check_lengths(images: Sequence[object], prompts: Sequence[str], responses: Sequence[str]) -> int:
    """Return the common length of the three inputs, or raise :class:`RewardShapeError`."""
    if not len(images) == len(prompts) == len(responses):
        raise RewardShapeError(
            f"images ({len(images)}), prompts ({len(prompts)}) and responses ({len(responses)}) "
            "must have the same length"
        )
    return len(prompts)


def check_client_index(client_index: int, num_clients: int) -> None:
    """Refuse an index that names no client."""
    if not 0 <= client_index < num_clients:
        raise IndexError(f"client index {client_index} out of range 0..{num_clients - 1}")


def _pixels(images: Sequence[Image.Image | ImageRef | None]) -> list[Image.Image | None]:
    """The images as a local scorer takes them: each distinct reference decoded once."""
    opened: dict[str, Image.Image] = {}
    out: list[Image.Image | None] = []
    for image in images:
        if isinstance(image, ImageRef):
            if image.sha256 not in opened:
                opened[image.sha256] = open_image(image)
            out.append(opened[image.sha256])
        else:
            out.append(image)
    return out


@runtime_checkable
class RewardSource(Protocol):
    """Scores triples with one client's reward model."""

    @property
    def num_clients(self) -> int:
        """Number of clients K; client indices are ``0..K-1``."""
        ...

    async def score(
        self,
        client_index: int,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> list[float]:
        """One score per triple from client ``client_index``."""
        ...


class InProcessRewardSource:
    """A :class:`RewardSource` over local scorer callables, one per client.

    Scorers run in worker threads so that ``asyncio.gather`` over several clients overlaps them
    (torch releases the GIL inside its kernels). ``calls`` counts queries per client.
    """

    def __init__(self, scorers: Sequence[ScoreFn]) -> None:
        if not scorers:
            raise ValueError("InProcessRewardSource needs at least one scorer")
        self._scorers = list(scorers)
        self.calls = [0] * len(self._scorers)
        self.triples = [0] * len(self._scorers)

    @property
    def num_clients(self) -> int:
        """Number of scorers."""
        return len(self._scorers)

    async def score(
        self,
        client_index: int,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> list[float]:
        """Run scorer ``client_index`` on the triples in a worker thread; its answer is checked
        here, once (one score per triple)."""
        n = len(prompts)
        check_client_index(client_index, len(self._scorers))
        self.calls[client_index] += 1
        self.triples[client_index] += n
        if n == 0:
            return []
        scorer = self._scorers[client_index]
        scores = await asyncio.to_thread(scorer, _pixels(images), list(prompts), list(responses))
        out = [float(s) for s in scores]
        if len(out) != n:
            raise RewardShapeError(f"client {client_index} returned {len(out)} scores for {n} triples")
        return out


class EmptyIsWorst:
    """A :class:`~sdk.alignment.RewardSource` over ``source`` that answers ``worst`` for a
    response that is empty after stripping whitespace, and asks ``source`` only about the rest.

    ``empty`` counts the completions answered locally.
    """

    def __init__(self, source: RewardSource, worst: float) -> None:
        self.source = source
        self.worst = float(worst)
        self.empty = 0

    @property
    def num_clients(self) -> int:
        """Number of clients K of the wrapped source."""
        return self.source.num_clients

    async def score(
        self,
        client_index: int,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
    ) -> list[float]:
        """``worst`` for empty responses, ``source``'s scores (in order) for the others (the
        batch's lengths and the answer's count are checked where they enter: the
        :class:`~sdk.alignment.CompletionBatch` and ``source``)."""
        n = len(responses)
        keep = [i for i, r in enumerate(responses) if r.strip()]
        self.empty += n - len(keep)
        out = [self.worst] * n
        if not keep:
            return out
        scores = await self.source.score(
            client_index,
            [images[i] for i in keep],
            [prompts[i] for i in keep],
            [responses[i] for i in keep],
        )
        for i, s in zip(keep, scores, strict=True):
            out[i] = float(s)
        return out
