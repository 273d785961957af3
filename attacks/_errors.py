"""Typed errors raised by the attack suite."""

from __future__ import annotations

__all__ = ["AttackError", "AttackInputError"]


class AttackError(Exception):
    """Base class of every error raised by ``attacks``."""


class AttackInputError(AttackError, ValueError):
    """An attack or metric received inputs of the wrong shape, range or size."""
