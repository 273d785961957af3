"""A deterministic local update for demos and tests (stands in for local router training)."""

from __future__ import annotations

import hashlib
import time

import numpy as np

from sdk.wire import RoundInfo

__all__ = ["SAMPLES_PARAM", "TRAIN_PARAM", "demo_update"]


TRAIN_PARAM = "demo_train_s"
"""Round parameter: seconds the demo update waits before returning, standing in for local
training that runs elsewhere (the site's accelerator); 0 when absent, at most 60."""
SAMPLES_PARAM = "demo_samples"
"""Round parameter: the sample count n_k the demo update reports (1-1000; default: 1-10 from
the name)."""


def demo_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(update (vector_length,) float32 in [-0.5, 0.5], weight n_k in [1, 10]) from the name
    (n_k: the round's ``demo_samples``, if given)."""
    wait = info.params.get(TRAIN_PARAM, 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
        raise ValueError(f"round parameter {TRAIN_PARAM} must be 0-60 seconds, not {wait!r}")
    time.sleep(wait)
    seed = int.from_bytes(hashlib.sha256(f"{name}/{info.round_id}".encode()).digest()[:8],
                          "little")
    rng = np.random.default_rng(seed)
    update = rng.uniform(-0.5, 0.5, info.vector_length).astype(np.float32)
    samples = info.params.get(SAMPLES_PARAM, int(seed % 10) + 1)
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 1000:
        raise ValueError(f"round parameter {SAMPLES_PARAM} must be 1-1000, not {samples!r}")
    return update, samples
