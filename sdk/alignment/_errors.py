"""Typed errors of the alignment stage; each message names the bad thing."""

from __future__ import annotations

__all__ = [
    "AlignmentError",
    "ArchitectureMismatchError",
    "RewardShapeError",
    "UnknownSelectionError",
]

DEFAULT_MAX_FAILED_FRACTION = 0.5
"""At most half of a step's completions may get the server's failure value: beyond, the
rewards say more about the members' outages than about the completions."""


class AlignmentError(RuntimeError):
    """Base class of every error raised by ``sdk.alignment``."""


class UnknownSelectionError(AlignmentError, KeyError):
    """A reward-selection strategy name that is not in the registry."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown reward selection"


class ArchitectureMismatchError(AlignmentError, ValueError):
    """FedAvg of reward models whose parameter names or shapes differ."""


class RewardShapeError(AlignmentError, ValueError):
    """A reward source or scorer returned the wrong number of scores, or inputs disagree in length."""
