"""Local router training on one client and the plain (unprotected) FedAvg baseline."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from sdk.router._encoder import EncodedBatch, concat_batches
from sdk.router._errors import RouterError, RouterShapeError
from sdk.router._model import Router
from sdk.wire._router_config import LocalTrainingConfig

__all__ = [
    "LocalRouterUpdate",
    "LocalTrainingConfig",
    "fedavg_plain",
    "train_router_locally",
]

RouterData = EncodedBatch | Sequence[EncodedBatch] | tuple[Tensor, Tensor]


@dataclass(frozen=True)
class LocalRouterUpdate:
    """What a client contributes to a round: its flat parameters phi_k, n_k and its mean
    training loss; a member's round update (``sdk.router.local_router_update``) also gives
    the router's mean loss on all its local responses before and after the local training."""

    params: np.ndarray
    num_samples: int
    loss: float
    loss_before: float | None = None
    loss_after: float | None = None


def _as_batch(data: RouterData) -> EncodedBatch:
    if isinstance(data, EncodedBatch):
        return data
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], Tensor):
        hidden, mask = data
        return EncodedBatch(hidden=hidden, mask=mask.bool())
    return concat_batches(list(data))  # type: ignore[arg-type]


def train_router_locally(
    router: Router,
    data: RouterData,
    client_index: int,
    config: LocalTrainingConfig | None = None,
) -> LocalRouterUpdate:
    """Train a copy of ``router`` on client ``client_index``'s encoded responses.

    Each row of ``data`` is one response: pass both the chosen and the rejected response of every
    local pair. The loss is BCE-with-logits of the K logits against the one-hot e_k. ``router``
    itself is not modified, so a federated driver can call this per client per round on the
    current global router. Deterministic given ``config.seed``.
    """
    cfg = config or LocalTrainingConfig()
    k = router.num_clients
    if not 0 <= client_index < k:
        raise RouterShapeError(f"client_index {client_index} out of range for K={k}")
    batch = _as_batch(data)
    n = len(batch)
    if n == 0:
        raise RouterShapeError("local router training needs at least one sample")
    if n < cfg.min_samples:
        raise RouterError(
            f"client {client_index} has {n} local samples, fewer than min_samples="
            f"{cfg.min_samples}: an update of so few samples can be reconstructed from the "
            "aggregate; add data or lower LocalTrainingConfig.min_samples deliberately"
        )

    local = copy.deepcopy(router)
    local.train()
    device = next(local.parameters()).device  # train where the router lives
    target = torch.zeros(k, device=device)
    target[client_index] = 1.0  # e_k
    opt = torch.optim.AdamW(local.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    total, seen = 0.0, 0
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            logits = local(batch.hidden[idx].to(device), batch.mask[idx].to(device))  # (b, K)
            loss = loss_fn(logits, target.expand_as(logits))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(local.parameters(), cfg.max_grad_norm)
            opt.step()
            total += float(loss.detach()) * len(idx)
            seen += len(idx)
    return LocalRouterUpdate(params=local.get_flat_params(), num_samples=n, loss=total / seen)


@torch.no_grad()
def router_loss(router: Router, data: RouterData, client_index: int, *,
                batch_size: int = 256) -> float:
    """The mean BCE-with-logits of ``router``'s K logits against e_k over every row of
    ``data``, in eval mode (no dropout): the loss local training lowers."""
    batch = _as_batch(data)
    was_training = router.training
    router.eval()
    device = next(router.parameters()).device
    target = torch.zeros(router.num_clients, device=device)
    target[client_index] = 1.0
    total = 0.0
    for start in range(0, len(batch), batch_size):
        logits = router(batch.hidden[start : start + batch_size].to(device),
                        batch.mask[start : start + batch_size].to(device))  # (b, K)
        total += float(torch.nn.functional.binary_cross_entropy_with_logits(
            logits, target.expand_as(logits), reduction="sum")) / router.num_clients
    router.train(was_training)
    return total / len(batch)


def fedavg_plain(updates: Sequence[LocalRouterUpdate]) -> np.ndarray:
    """sum_k n_k phi_k / sum_k n_k in the clear: the baseline secure aggregation must match."""
    if not updates:
        raise RouterShapeError("fedavg_plain needs at least one update")
    shapes = {u.params.shape for u in updates}
    if len(shapes) != 1:
        raise RouterShapeError(f"updates have different shapes: {sorted(shapes)}")
    weights = np.array([u.num_samples for u in updates], dtype=np.float64)
    if np.any(weights < 0) or weights.sum() <= 0:
        raise RouterShapeError(f"num_samples must be >= 0 with a positive sum, got {weights}")
    stacked = np.stack([u.params.astype(np.float64) for u in updates])  # (n_clients, P)
    return ((weights @ stacked) / weights.sum()).astype(np.float32)
