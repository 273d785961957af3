"""A deterministic local update for demos and tests (stands in for local router training).

Its options travel in the round's ``update`` parameter, which the server passes to the members'
update sources unread; this update checks them itself."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from sdk.wire import RoundInfo

__all__ = ["demo_params", "demo_update"]


_OPTIONS = "update"
"""The round parameter that carries the options of the members' own update source."""
_TRAIN = "train_s"
"""Demo option: seconds the demo update waits before returning, standing in for local
training that runs elsewhere (the site's accelerator); 0 when absent, at most 60."""
_SAMPLES = "samples"
"""Demo option: the sample count n_k the demo update reports (1-1000; default: 1-10 from the
name)."""


def demo_params(*, samples: int | None = None, train_s: float | None = None) -> dict[str, Any]:
    """Round ``params`` that set the demo update's options (None: its default)."""
    options = {k: v for k, v in ((_SAMPLES, samples), (_TRAIN, train_s))
               if v is not None}
    return {_OPTIONS: options}


def demo_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(update (vector_length,) float32 in [-0.5, 0.5], weight n_k in [1, 10]) from the name
    (n_k: the round's ``samples`` option, if given); ``ValueError`` on an option out of bounds."""
    options = info.params.get(_OPTIONS, {})
    if not isinstance(options, dict):
        raise ValueError(f"round parameter {_OPTIONS} must be an object, not {options!r}")
    wait = options.get(_TRAIN, 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
        raise ValueError(f"round parameter {_OPTIONS}.{_TRAIN} must be 0-60 seconds, not "
                         f"{wait!r}")
    time.sleep(wait)
    seed = int.from_bytes(hashlib.sha256(f"{name}/{info.round_id}".encode()).digest()[:8],
                          "little")
    rng = np.random.default_rng(seed)
    update = rng.uniform(-0.5, 0.5, info.vector_length).astype(np.float32)
    samples = options.get(_SAMPLES, int(seed % 10) + 1)
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 1000:
        raise ValueError(f"round parameter {_OPTIONS}.{_SAMPLES} must be 1-1000, not "
                         f"{samples!r}")
    return update, samples
