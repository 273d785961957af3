"""Typed errors of the router package."""

from __future__ import annotations

__all__ = ["RouterError", "RouterMismatchError", "RouterShapeError"]


class RouterError(ValueError):
    """Base class of every error raised by ``sdk.router``."""


class RouterMismatchError(RouterError):
    """A router (or checkpoint, or client) disagrees on the client set or on the encoder."""


class RouterShapeError(RouterError):
    """A tensor or flat parameter vector has the wrong shape."""
