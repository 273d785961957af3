"""A deterministic local update for demos and tests (stands in for local router training)."""

from __future__ import annotations

import hashlib

import numpy as np

from server_app._schemas import RoundInfo

__all__ = ["demo_update"]


def demo_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(update (vector_length,) float32 in [-0.5, 0.5], weight n_k in [1, 10]) from the name."""
    seed = int.from_bytes(hashlib.sha256(f"{name}/{info.round_id}".encode()).digest()[:8],
                          "little")
    rng = np.random.default_rng(seed)
    update = rng.uniform(-0.5, 0.5, info.vector_length).astype(np.float32)
    return update, int(seed % 10) + 1
