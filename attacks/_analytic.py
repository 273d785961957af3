"""Analytic inversion of a linear layer with bias from its gradient (or update).

For one sample x through ``y = W x + b``: dL/dW = (dL/dy) x^T and dL/db = dL/dy, so every row
with db_i != 0 gives x = dW_i / db_i exactly. The same holds for a parameter delta after several
local SGD steps on that one sample, because the layer's input does not change between steps.

With several samples, dW_i = sum_n g_{n,i} x_n and db_i = sum_n g_{n,i}: each row ratio is a
mixture of the inputs with row-dependent weights. :func:`analytic_linear_inversion` returns the
least-squares combination over the strongest rows, i.e. a weighted mixture; it does not try to
separate samples. That is what secure aggregation relies on: the server sees only the sum over
clients (each with many samples), so the recovered vector is a blend of everyone's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from attacks._errors import AttackInputError

__all__ = [
    "analytic_attack_on_update",
    "analytic_linear_candidates",
    "analytic_linear_inversion",
    "first_linear_layer",
]


def _strong_rows(db: torch.Tensor, top_k: int) -> torch.Tensor:
    nonzero = int((db.abs() > 0).sum())
    if nonzero == 0:
        raise AttackInputError("the bias update is all zeros: nothing to invert")
    k = min(top_k, nonzero)
    return torch.topk(db.abs(), k).indices  # (k,)


def _check(dw: torch.Tensor, db: torch.Tensor) -> None:
    if dw.ndim != 2 or db.ndim != 1 or dw.shape[0] != db.shape[0]:
        raise AttackInputError(
            f"expected dW (out, in) and db (out,), got {tuple(dw.shape)} and {tuple(db.shape)}"
        )


def analytic_linear_candidates(
    dw: torch.Tensor, db: torch.Tensor, *, top_k: int = 8
) -> torch.Tensor:
    """Per-row candidates dW_i / db_i for the ``top_k`` rows with largest |db_i|, shape (k, in)."""
    _check(dw, db)
    rows = _strong_rows(db, top_k)
    return (dw[rows] / db[rows, None]).detach()


def analytic_linear_inversion(
    dw: torch.Tensor, db: torch.Tensor, *, top_k: int = 8
) -> torch.Tensor:
    """Recover the layer input, shape (in,): sum_i db_i dW_i / sum_i db_i^2 over the ``top_k``
    rows with largest |db_i| (the least-squares x with dW_i ~ db_i x). Exact for one sample;
    a weighted mixture of the inputs for several samples."""
    _check(dw, db)
    rows = _strong_rows(db, top_k)
    w = db[rows].to(torch.float64)  # (k,)
    x = (w[:, None] * dw[rows].to(torch.float64)).sum(0) / (w**2).sum()
    return x.to(dw.dtype).detach()


def first_linear_layer(model: nn.Module) -> tuple[str, nn.Linear]:
    """The first ``nn.Linear`` with a bias in module registration order, with its name."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            return name, module
    raise AttackInputError(f"{type(model).__name__} has no nn.Linear layer with a bias")


def analytic_attack_on_update(
    model: nn.Module,
    update: Mapping[str, torch.Tensor],
    *,
    layer: str | None = None,
    top_k: int = 8,
) -> torch.Tensor:
    """Invert the first linear layer of ``model`` (or the named ``layer``) from an update
    keyed like ``model.named_parameters()`` (a gradient, or a parameter delta)."""
    name = layer if layer is not None else first_linear_layer(model)[0]
    wkey, bkey = f"{name}.weight" if name else "weight", f"{name}.bias" if name else "bias"
    missing = [k for k in (wkey, bkey) if k not in update]
    if missing:
        raise AttackInputError(f"the update has no entry for {missing} (layer {name!r})")
    return analytic_linear_inversion(update[wkey], update[bkey], top_k=top_k)
