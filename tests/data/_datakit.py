"""Helpers for the data tests (a unique module name: test folders are not packages)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdk.data import SynthConfig

SMALL = SynthConfig(
    seed=3,
    train_pairs=40,
    eval_pairs=12,
    heldout_pairs=10,
    warmup_queries=8,
    policy_train_queries=6,
    policy_eval_queries=5,
    client_train_pairs={"safety": 25},
)
"""The benchmark of the ``bench`` fixture: small, every split present, one size override."""

WriteDir = Callable[..., Path]


def pair_record(index: int, **changes: Any) -> dict[str, Any]:
    """A valid pairs.jsonl record pointing at ``images/<index>.png``."""
    record = {
        "id": f"p{index}",
        "image": f"images/{index}.png",
        "prompt": "What color is the shape?",
        "chosen": "A. red",
        "rejected": "B. green",
        "category": "color",
    }
    record.update(changes)
    return record
