"""Routing modes over router logits: sparse (argmax) and dense (softmax weights)."""

from __future__ import annotations

import torch
from torch import Tensor

from sdk.router._errors import RouterShapeError

__all__ = ["route", "soft_weights"]


def _check(logits: Tensor) -> None:
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise RouterShapeError(f"logits must be (B, K) with K >= 1, got {tuple(logits.shape)}")


def route(logits: Tensor, allowed: Tensor | None = None) -> Tensor:
    """Sparse routing: the one client index per row, LongTensor (B,); ``allowed`` (K,) bool
    limits it to those clients (a masked client is never picked)."""
    _check(logits)
    if allowed is None:
        return logits.argmax(dim=1)
    if allowed.shape != logits.shape[1:] or not bool(allowed.any()):
        raise RouterShapeError(f"allowed must be ({logits.shape[1]},) bool with a client "
                               f"allowed, got {allowed.tolist()}")
    return logits.masked_fill(~allowed.to(logits.device), float("-inf")).argmax(dim=1)


def soft_weights(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Dense mixture weights softmax(logits / temperature), (B, K), rows sum to 1."""
    _check(logits)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.softmax(logits / temperature, dim=1)
