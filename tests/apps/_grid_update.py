"""A member's Python update function (``LocalConsortium(updates=...)``) whose updates lie on the secure round's fixed-point grid.

``site-i`` moves the round's base by a seeded multiple of 2^-12 per coordinate with weight
n_k = 2^i: with ``max_weight`` 4 and ``scale_bits`` 16 every ``n_k * delta`` is an exact
integer on the grid, so stochastic rounding draws nothing and the aggregate is the same
whatever randomness each member's encoder uses.
"""

from __future__ import annotations

import numpy as np

STEP = 2.0**-12
QUANTIZATION = {"clip_range": 1.0, "scale_bits": 16, "max_weight": 4}


def grid_delta(name: str, length: int) -> tuple[np.ndarray, int]:
    """(delta (length,) float32 on the grid, n_k) of member ``name`` (``site-i``)."""
    index = int(name.rsplit("-", 1)[1])
    steps = np.random.default_rng(index).integers(-200, 201, size=length)
    return (steps * STEP).astype(np.float32), 2**index


def grid_update(name: str, info: object, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(phi_k = base + this member's grid delta (P,) float32, n_k)."""
    delta, weight = grid_delta(name, int(info.vector_length))  # type: ignore[attr-defined]
    return (delta if base is None else base + delta).astype(np.float32), weight
