"""Fixed-point encoding of weighted updates into the uint32 ring (mod 2^32)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sdk.secagg._errors import InvalidUpdateError, QuantizationOverflowError

__all__ = ["QuantizationConfig", "decode_sum", "encode_weighted", "validate_update"]

_HALF_RING = 2**31  # sums are read back as signed int32
MAX_CLIP_RANGE = float(_HALF_RING)
"""No larger clip range fits the int32 ring even at scale 1 for one client."""
MAX_CLIENTS = 2**16
"""The most clients (and so the largest degree or threshold) a round may name."""


class QuantizationConfig(BaseModel):
    """Fixed-point parameters. A client with weight w in [1, max_weight] encodes
    ``round(clip(x, -clip_range, clip_range) * w / max_weight * 2**scale_bits)`` (stochastic
    rounding), so one client adds at most ``clip_range * 2**scale_bits`` per element whatever
    its weight, and the weight itself travels as an extra element."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    clip_range: float = Field(default=1.0, gt=0, le=MAX_CLIP_RANGE)
    scale_bits: int = Field(default=20, ge=0, le=30)
    max_weight: int = Field(default=1000, ge=1)

    @property
    def scale(self) -> float:
        """Multiplier from (weight-scaled) real values to integers."""
        return float(2**self.scale_bits)

    def check_capacity(self, num_clients: int) -> None:
        """Raise if the sum of ``num_clients`` encodings could wrap around signed 32 bits."""
        worst = num_clients * (math.ceil(self.clip_range * self.scale) + 1)
        if worst >= _HALF_RING:
            fit = max(0, math.floor(math.log2(_HALF_RING / (num_clients * self.clip_range))) - 1)
            raise QuantizationOverflowError(
                f"{num_clients} clients x clip_range {self.clip_range} x 2^{self.scale_bits} "
                f"= {worst} reaches 2^31: lower scale_bits (<= {fit} fits) or clip_range"
            )
        if num_clients * self.max_weight >= _HALF_RING:
            raise QuantizationOverflowError(
                f"{num_clients} clients x max_weight {self.max_weight} reaches 2^31: lower max_weight"
            )

    @classmethod
    def fitted(cls, *, num_clients: int, clip_range: float = 1.0, max_weight: int = 1000) -> QuantizationConfig:
        """The finest scale that cannot overflow for ``num_clients``."""
        for bits in range(30, -1, -1):
            cfg = cls(clip_range=clip_range, scale_bits=bits, max_weight=max_weight)
            try:
                cfg.check_capacity(num_clients)
            except QuantizationOverflowError:
                continue
            return cfg
        raise QuantizationOverflowError(
            f"even scale_bits=0 overflows for {num_clients} clients: lower max_weight or clip_range"
        )


def validate_update(update: object, weight: object, *, length: int | None, max_weight: int) -> tuple[np.ndarray, int]:
    """Check an update (1-D finite float array) and its weight; return them normalized."""
    if not isinstance(update, np.ndarray):
        raise InvalidUpdateError(f"update must be a numpy array, got {type(update).__name__}")
    if update.dtype not in (np.float32, np.float64):
        raise InvalidUpdateError(f"update dtype must be float32 or float64, got {update.dtype}")
    if update.ndim != 1:
        raise InvalidUpdateError(f"update must be 1-D, got shape {update.shape}")
    if length is not None and update.shape[0] != length:
        raise InvalidUpdateError(f"update has {update.shape[0]} elements, the round expects {length}")
    if not np.all(np.isfinite(update)):
        raise InvalidUpdateError("update contains NaN or Inf")
    if isinstance(weight, bool) or not isinstance(weight, int | np.integer):
        raise InvalidUpdateError(f"weight must be an integer, got {weight!r}")
    if not 1 <= int(weight) <= max_weight:
        raise InvalidUpdateError(f"weight {weight} outside [1, max_weight={max_weight}]")
    return update, int(weight)


def encode_weighted(update: np.ndarray, weight: int, cfg: QuantizationConfig, rng: np.random.Generator, *, block: int = 1 << 15) -> np.ndarray:
    """Return the fixed-point ``weight * update`` followed by ``weight``, as uint32 (P+1,).

    Worked in (block,) float64 slices that stay in cache; the result does not depend on block.
    """
    n = update.shape[0]
    out = np.empty(n + 1, dtype=np.uint32)
    signed = out[:-1].view(np.int32)  # two's complement: negatives wrap into the ring
    factor = weight / cfg.max_weight * cfg.scale
    buf, dither = np.empty(min(block, n)), np.empty(min(block, n))
    for start in range(0, n, block):
        m = min(block, n - start)
        v, u = buf[:m], dither[:m]
        v[:] = update[start : start + m]  # widened first: a float32 update encodes exactly
        np.clip(v, -cfg.clip_range, cfg.clip_range, out=v)  # like its float64 copy would
        v *= factor
        rng.random(out=u)
        v += u  # stochastic rounding: E[floor(v + u)] = v
        np.floor(v, out=v)
        signed[start : start + m] = v
    out[-1] = weight
    return out


def decode_sum(total: np.ndarray, cfg: QuantizationConfig) -> tuple[np.ndarray, int]:
    """Turn the ring sum (P+1,) uint32 into (sum_k w_k x_k (P,) float64, sum_k w_k)."""
    signed = total[:-1].view(np.int32)
    return signed.astype(np.float64) * (cfg.max_weight / cfg.scale), int(total[-1])
