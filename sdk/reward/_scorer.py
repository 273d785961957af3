"""``ClientScorer``: the only object that answers reward queries from outside a client."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from sdk.models import Runtime, input_pixels
from sdk.reward._model import RewardModel
from sdk.reward._normalizer import ScoreNormalizer

__all__ = ["ClientScorer"]


class ClientScorer:
    """Wraps a client's reward model and normalizer; only normalized, clipped scores leave."""

    def __init__(self, model: RewardModel, normalizer: ScoreNormalizer) -> None:
        self._model = model.eval()
        self._normalizer = normalizer

    @property
    def architecture(self) -> str:
        """The backbone architecture (not secret: the server may log it)."""
        return self._model.architecture

    @property
    def input_pixels(self) -> int | None:
        """The most pixels of an image the model sees (its processor's settings): a client
        app scales larger images down to it before scoring or caching them."""
        return input_pixels(self._model.bundle.processor)

    @property
    def clip(self) -> float:
        """The clip bound c: every answer lies in [-c, c]."""
        return self._normalizer.clip

    @classmethod
    def from_pretrained(cls, path: str | Path, *, base: str | Path | None = None,
                        runtime: Runtime | None = None) -> ClientScorer:
        """Load a reward checkpoint directory that holds a fitted ``normalizer.json``; an
        adapter checkpoint loads over ``base`` (default: the base it was trained on), on
        ``runtime``'s device and dtype."""
        return cls(RewardModel.from_pretrained(path, base=base, runtime=runtime),
                   ScoreNormalizer.load(path))

    def score(
        self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str]
    ) -> list[float]:
        """``clip((R(x, y) - mu) / (sigma + eps), -c, c)`` per (image, prompt, response), as
        Python floats computed from float32 scores on the CPU whatever the model's dtype."""
        raw = self._model.score(images, prompts, responses)
        normalized: torch.Tensor = self._normalizer.normalize(raw)
        return [float(v) for v in normalized]
