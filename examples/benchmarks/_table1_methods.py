"""Table 1's methods: one named factory per row, seed -> (reward selection, scorers it reads).

Every method is a reward-selection strategy (``sdk.alignment.make_selection``) over the same
clients; only ``mor_no_norm`` reads the clients' raw scales, and only ``fedavg_rm`` its own
FedAvg-trained reward model (built on first use: the other rows never pay for it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from _table1_config import UsageError

from sdk.alignment import NeuralTSChooser, RewardSelection, make_selection

__all__ = ["MethodFactory", "method_registry", "pick_methods"]

MethodFactory = Callable[[int], tuple[RewardSelection, Sequence[Any]]]


def _best_single(seed: int, *, client: int,
                 scorers: Sequence[Any]) -> tuple[RewardSelection, Sequence[Any]]:
    return make_selection("best_single", client=client), scorers


def method_registry(normalized: Sequence[Any], raw: Sequence[Any],
                    chooser: Callable[[int], NeuralTSChooser], fedavg: Callable[[], Any],
                    clients: Sequence[str]) -> dict[str, MethodFactory]:
    """Every method by name: ``chooser(seed)`` a fresh copy of the trained router, ``fedavg()``
    FedAvg-RM's reward source, ``clients`` the client names (one best-single row each)."""
    methods: dict[str, MethodFactory] = {
        "mor": lambda s: (make_selection("mor", chooser=chooser(s)), normalized),
        "mor_no_online": lambda s: (make_selection("mor_no_online", chooser=chooser(s)), normalized),
        "mor_no_norm": lambda s: (make_selection("mor", chooser=chooser(s)), raw),
        "random": lambda s: (make_selection("random", seed=s), normalized),
        "avg_rm": lambda s: (make_selection("avg_rm"), normalized),
        "plurallm_alpha": lambda s: (make_selection("plurallm_alpha", alpha=1.0), normalized),
        "fedavg_rm": lambda s: (make_selection("fedavg_rm", averaged=fedavg()), normalized),
    }
    for k, c in enumerate(clients):
        methods[f"best_single_{c}"] = functools.partial(_best_single, client=k, scorers=normalized)
    return methods


def pick_methods(methods: dict[str, MethodFactory], wanted: str | None) -> dict[str, MethodFactory]:
    """The comma-separated ``wanted`` methods in that order (all without); unknown: UsageError."""
    if not wanted:
        return methods
    names = [m.strip() for m in wanted.split(",") if m.strip()]
    unknown = sorted(set(names) - set(methods))
    if unknown:
        raise UsageError(f"unknown methods {unknown}; choose from {sorted(methods)}")
    return {m: methods[m] for m in names}
