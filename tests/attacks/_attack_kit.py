"""Shared test material for tests/attacks: small real models, real data, real training."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attacks import PairScorer, smooth_images
from sdk.reward import RewardTrainingConfig

__all__ = [
    "CLIENT",
    "PairData",
    "Router",
    "embeddings",
    "image_model",
    "reward_run_dir",
    "router_loss",
    "smooth_images",
    "synth_client_data",
    "train_reward_scorer",
]

CLIENT = "detail"


def synth_client_data(root: Path, *, train_pairs: int = 16, eval_pairs: int = 8) -> Path:
    """Synthetic pairs of one client in the demo layout under ``root``; returns
    ``root/clients/<CLIENT>`` (with ``train/`` and ``eval/``)."""
    from sdk.data import SynthConfig, synthesize

    synthesize(
        SynthConfig(
            seed=1,
            image_size=32,
            clients=(CLIENT,),
            heldout=("color",),
            train_pairs=train_pairs,
            eval_pairs=eval_pairs,
            heldout_pairs=1,
            warmup_queries=0,
            policy_train_queries=0,
            policy_eval_queries=0,
        ),
        root,
    )
    return root / "clients" / CLIENT


def reward_run_dir(
    root: Path, cfg: RewardTrainingConfig, backbone: Callable[[Path, list[str]], Path]
) -> Path:
    """A demo-layout run directory with one client's reward model trained with ``cfg`` from
    ``backbone(root / "backbone", corpus)``."""
    from sdk.data import load_pairs
    from sdk.reward import RewardModel, pair_texts, train_reward_model

    train = load_pairs(synth_client_data(root / "data") / "train")
    base = backbone(root / "backbone", pair_texts(train))
    train_reward_model(
        RewardModel.from_backbone(base, lora=cfg.lora),
        train,
        [],
        cfg,
        out_dir=root / "reward_models" / CLIENT,
        progress=False,
    )
    return root


def image_model(seed: int = 1) -> nn.Module:
    """A small differentiable image encoder (two convs) plus a linear head with 4 outputs."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.Sigmoid(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.Sigmoid(),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 32),
        nn.Sigmoid(),
        nn.Linear(32, 4),
    )


class Router(nn.Module):
    """A router on frozen encoder embeddings: Linear first layer, then a K-way linear head."""

    def __init__(self, dim: int = 32, hidden: int = 64, k: int = 3, seed: int = 2) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.proj = nn.Linear(dim, hidden)
        self.head = nn.Linear(hidden, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(x)))  # (B, K) logits


def router_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """BCE against the client's one-hot, as in fedmor's router training."""
    return nn.functional.binary_cross_entropy_with_logits(logits, target)


def embeddings(n: int, *, dim: int = 32, seed: int = 0) -> torch.Tensor:
    """(n, dim) embeddings with a shared component, like a frozen encoder's outputs."""
    g = torch.Generator().manual_seed(seed)
    common = torch.randn(dim, generator=torch.Generator().manual_seed(123))
    return common + 0.7 * torch.randn(n, dim, generator=g)


# ---- reward-model material for membership inference ------------------------------------

Pair = int  # a pair is an index into PairData


class PairData:
    """Random feature pairs: x, chosen, rejected (P, dim) each; the preference is a
    weak linear signal plus noise, so a model that separates its training pairs memorizes."""

    def __init__(self, n: int, *, dim: int = 16, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        a = torch.randn(n, dim, generator=g)
        b = torch.randn(n, dim, generator=g)
        w = torch.randn(dim, generator=torch.Generator().manual_seed(99))
        signal = (a - b) @ w * 0.1 + torch.randn(n, generator=g)
        first = (signal > 0)[:, None]
        self.chosen = torch.where(first, a, b)
        self.rejected = torch.where(first, b, a)

    def feats(self, idx: Sequence[Pair]) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.as_tensor(list(idx), dtype=torch.long)
        x = self.x[i]
        return torch.cat([x, self.chosen[i]], 1), torch.cat([x, self.rejected[i]], 1)


def train_reward_scorer(
    data: PairData, pairs: Sequence[Pair], *, epochs: int = 300, seed: int = 0
) -> PairScorer[Pair]:
    """Train a small MLP reward model with the Bradley-Terry loss on ``pairs`` (full batch,
    no regularization: it over-fits) and return its raw, unnormalized margin scorer."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(2 * data.x.shape[1], 64), nn.Tanh(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    pos, neg = data.feats(pairs)
    for _ in range(epochs):
        opt.zero_grad()
        margin = model(pos) - model(neg)
        loss = -nn.functional.logsigmoid(margin).mean()
        loss.backward()
        opt.step()

    def score(batch: Sequence[Pair]) -> np.ndarray:
        p, n = data.feats(batch)
        with torch.no_grad():
            return (model(p) - model(n)).reshape(-1).numpy().astype(np.float64)

    return score
