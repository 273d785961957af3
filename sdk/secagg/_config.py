"""Server-side round configuration, resolved into the public ``RoundParams``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdk.secagg._dp import DPConfig
from sdk.secagg._errors import ConfigError
from sdk.secagg._graph import check_majority_threshold, default_degree
from sdk.secagg._quantize import MAX_CLIENTS, MAX_CLIP_RANGE, QuantizationConfig
from sdk.secagg._schema import RoundParams

__all__ = ["SecAggConfig"]


class SecAggConfig(BaseModel):
    """How to run rounds. ``None`` picks a default from the number of participants:
    degree 2*ceil(log2 N)+2 (SecAgg+), threshold floor((degree+1)/2)+1 (a majority of each
    client's share holders), and the finest quantization that cannot overflow.

    ``clip_range`` and ``max_weight`` fit that quantization. An explicit ``quantization`` carries
    its own: they are then copied from it, and different values given alongside it are an error
    (either would otherwise be silently ignored). Build changed copies with ``model_validate``,
    not ``model_copy(update=...)``, which skips this check."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    degree: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    threshold: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    quantization: QuantizationConfig | None = None
    clip_range: float = Field(default=1.0, gt=0, le=MAX_CLIP_RANGE)
    max_weight: int = Field(default=1000, ge=1)
    dp: DPConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _quantization_owns_its_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("quantization") is None:
            return data
        quant = QuantizationConfig.model_validate(data["quantization"])
        for name in ("clip_range", "max_weight"):
            if name in data and data[name] != getattr(quant, name):
                raise ValueError(
                    f"{name}={data[name]!r} contradicts quantization.{name}={getattr(quant, name)!r}: "
                    f"give {name} inside quantization, or drop quantization to have it fitted"
                )
        return {**data, "quantization": quant, "clip_range": quant.clip_range, "max_weight": quant.max_weight}

    def round_params(self, participants: Sequence[int], vector_length: int, *, round_id: str | None = None, graph_seed: bytes | None = None) -> RoundParams:
        """Resolve the defaults for these participants and check that they are consistent."""
        n = len(participants)
        if n < 2:
            raise ConfigError(f"secure aggregation needs >= 2 participants, got {n}")
        degree = min(self.degree, n - 1) if self.degree is not None else default_degree(n)
        threshold = self.threshold if self.threshold is not None else (degree + 1) // 2 + 1
        if threshold > degree + 1:
            raise ConfigError(f"threshold {threshold} exceeds the {degree + 1} share holders (degree + 1); raise degree or lower threshold")
        check_majority_threshold(threshold, degree, n)
        quant = self.quantization or QuantizationConfig.fitted(num_clients=n, clip_range=self.clip_range, max_weight=self.max_weight)
        quant.check_capacity(n)
        return RoundParams(
            round_id=round_id or uuid.uuid4().hex,
            participants=sorted(participants),
            threshold=threshold,
            degree=degree,
            vector_length=vector_length,
            graph_seed=graph_seed or os.urandom(32),
            quantization=quant,
            dp=self.dp,
        )
