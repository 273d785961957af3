"""``EmptyIsWorst``: a reward source wrapper that scores empty completions without a query.

A sampled policy emits an empty completion whenever it draws EOS first. A client's reward model
refuses an empty response (the client app answers 422), and one refused query would stop GRPO.
An empty answer is never better than any real one, so it gets the lowest score a client can
return (``-c`` for normalized, clipped clients) and no client is asked about it.
"""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from sdk.alignment._reward_source import RewardSource
from sdk.wire import ImageRef

__all__ = ["EmptyIsWorst"]


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
