"""What leaves a member: ``ClientScorer``, the only object that answers reward queries from
outside a client, and ``ScoreNormalizer``, the per-client z-score and clip it applies to every
score (mu and sigma fitted on the member's training scores)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from sdk.models import Runtime, input_pixels
from sdk.reward._config import DEFAULT_CLIP
from sdk.reward._model import RewardModel

__all__ = ["NORMALIZER_FILE", "ClientScorer", "ScoreNormalizer"]


NORMALIZER_FILE = "normalizer.json"


class ScoreNormalizer(BaseModel):
    """``clip((raw - mu) / (sigma + eps), -clip, clip)`` with mu, sigma from training scores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mu: float = 0.0
    sigma: float = Field(default=1.0, ge=0.0)
    clip: float = Field(default=DEFAULT_CLIP, gt=0.0)
    eps: float = Field(default=1e-6, gt=0.0)
    n: int = Field(default=0, ge=0, description="number of scores mu and sigma came from")

    @classmethod
    def fit(
        cls, scores: Sequence[float] | torch.Tensor, *, clip: float = DEFAULT_CLIP,
        eps: float = 1e-6,
    ) -> ScoreNormalizer:
        """Fit mu and sigma (population std) over the raw scores of the training responses."""
        values = torch.as_tensor(scores, dtype=torch.float64).flatten()
        if values.numel() == 0:
            raise ValueError("cannot fit a ScoreNormalizer on zero scores")
        if not torch.isfinite(values).all():
            raise ValueError("cannot fit a ScoreNormalizer: some scores are not finite")
        return cls(
            mu=float(values.mean()), sigma=float(values.std(unbiased=False)), clip=clip, eps=eps,
            n=int(values.numel()),
        )

    def normalize(self, raw: torch.Tensor) -> torch.Tensor:
        """Normalized, clipped scores, same shape as ``raw``."""
        z = (raw.to(torch.float64) - self.mu) / (self.sigma + self.eps)
        return z.clamp(-self.clip, self.clip).to(raw.dtype)

    def save(self, directory: str | Path) -> Path:
        """Write ``normalizer.json`` into ``directory``."""
        path = Path(directory) / NORMALIZER_FILE
        path.write_text(json.dumps(self.model_dump(), indent=2))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> ScoreNormalizer:
        """Read ``normalizer.json`` from ``directory``."""
        path = Path(directory) / NORMALIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no score normalizer at {path}")
        return cls.model_validate_json(path.read_text())


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
