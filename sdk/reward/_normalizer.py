"""``ScoreNormalizer``: the per-client z-score and clip applied to every score that leaves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_CLIP", "NORMALIZER_FILE", "ScoreNormalizer"]

NORMALIZER_FILE = "normalizer.json"

# c = 3: a z-score beyond 3 standard deviations of the client's own training scores carries
# little ranking information but could let one client dominate a mixture; 3 keeps 99.7% of a
# Gaussian unclipped while bounding each answer to [-3, 3].
DEFAULT_CLIP = 3.0
"""The clip bound c of normalized scores when a scorer declares none."""


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
