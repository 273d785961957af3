"""The membership-inference testbed's reward model: a small MLP on random pair features, trained
plainly (it over-fits) or with record-level DP-SGD (sdk.reward's ``PairDPSGD``).

The pairs are random features whose preference is a weak linear signal plus noise, so a model
that separates its training pairs memorizes them: the deliberately unprotected setting in which
the margin-threshold attack and LiRA must bite. The same recipe with ``dp`` set clips each
pair's gradient, adds Gaussian noise and accounts epsilon with opacus' RDP accountant, exactly as
``train_reward_model`` does for a real ``RewardModel`` (one record = one preference pair); it
is what a privacy officer would switch on, and what the benchmark's "DP" row measures.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from attacks._errors import AttackInputError
from attacks._membership import PairScorer, ShadowTrainer

if TYPE_CHECKING:  # sdk.reward imports transformers, which is slow: only when DP training runs
    from sdk.reward import DPSettings

__all__ = [
    "MlpPairs",
    "MlpRewardConfig",
    "TrainedMlpReward",
    "mlp_shadow_trainer",
    "overfit_mlp_scores",
    "train_mlp_reward",
]


class MlpPairs:
    """N random preference pairs as features: chosen and rejected rows (N, 2 * dim), each the
    concatenation of a shared context x and one response. A pair is its index."""

    def __init__(self, n: int, *, dim: int = 16, seed: int = 0) -> None:
        if n < 1:
            raise AttackInputError(f"need at least one pair, got {n}")
        g = torch.Generator().manual_seed(seed)
        x, a, b = (torch.randn(n, dim, generator=g) for _ in range(3))
        w = torch.randn(dim, generator=torch.Generator().manual_seed(99))
        # A weak signal (std about 0.57) under unit noise: at best about two thirds of unseen pairs
        # are learnable.
        first = (((a - b) @ w) * 0.1 + torch.randn(n, generator=g) > 0)[:, None]
        self.pos = torch.cat([x, torch.where(first, a, b)], 1)  # (N, 2*dim)
        self.neg = torch.cat([x, torch.where(first, b, a)], 1)  # (N, 2*dim)

    def __len__(self) -> int:
        return int(self.pos.shape[0])


class MlpRewardConfig(BaseModel):
    """Training recipe of the MLP reward model. Without DP: full-batch Bradley-Terry with Adam,
    no regularization (it over-fits). With DP (``train_mlp_reward(..., dp=...)``): Poisson
    batches of expected size ``dp_batch_size`` pairs, as many steps as ``epochs`` passes over
    the data, each pair's gradient clipped and noised by sdk.reward's ``PairDPSGD``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epochs: int = Field(default=300, ge=1)
    lr: float = Field(default=1e-2, gt=0)
    hidden: int = Field(default=64, ge=1)
    seed: int = 0
    dp_batch_size: int = Field(default=32, ge=1)


@dataclass(frozen=True)
class TrainedMlpReward:
    """A trained MLP reward model, with the privacy spent when it was trained with DP-SGD."""

    model: nn.Module
    spent_epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    steps: int = 0

    @torch.no_grad()
    def rewards(self, pairs: MlpPairs, idx: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """Raw rewards of the chosen and the rejected responses of ``idx`` (all: None), (n,)."""
        i = torch.arange(len(pairs)) if idx is None else torch.as_tensor(list(idx))
        return self.model(pairs.pos[i]).reshape(-1), self.model(pairs.neg[i]).reshape(-1)

    def scorer(self, pairs: MlpPairs) -> PairScorer[int]:
        """Raw margins R(x, y+) - R(x, y-) of pair indices: what the attacks query."""

        def score(idx: Sequence[int]) -> np.ndarray:
            p, q = self.rewards(pairs, idx)
            return (p - q).double().numpy()  # (len(idx),)

        return score

    def accuracy(self, pairs: MlpPairs, idx: Sequence[int]) -> float:
        """Share of the pairs ``idx`` whose chosen response scores higher (utility)."""
        return float((self.scorer(pairs)(idx) > 0).mean())


def _bt_loss(model: nn.Module, pos: Tensor, neg: Tensor) -> Tensor:
    return -nn.functional.logsigmoid(model(pos) - model(neg)).mean()  # pos, neg: (n, 2*dim)


def train_mlp_reward(
    pairs: MlpPairs,
    train: Sequence[int],
    config: MlpRewardConfig | None = None,
    *,
    dp: DPSettings | None = None,
) -> TrainedMlpReward:
    """Train a fresh MLP reward model on the pairs ``train`` (indices into ``pairs``), with
    record-level DP-SGD at ``dp``'s target epsilon when given."""
    cfg = config or MlpRewardConfig()
    if not train:
        raise AttackInputError("train_mlp_reward needs at least one training pair")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        dim = pairs.pos.shape[1]
        model = nn.Sequential(nn.Linear(dim, cfg.hidden), nn.Tanh(), nn.Linear(cfg.hidden, 1))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    idx = torch.as_tensor(list(train))
    pos, neg = pairs.pos[idx], pairs.neg[idx]  # (n, 2*dim)
    if dp is None:
        for _ in range(cfg.epochs):
            opt.zero_grad()
            _bt_loss(model, pos, neg).backward()
            opt.step()
        return TrainedMlpReward(model, steps=cfg.epochs)
    from sdk.reward import PairDPSGD

    n = len(idx)
    steps = max(1, round(cfg.epochs * n / min(cfg.dp_batch_size, n)))
    sgd = PairDPSGD(model.parameters(), dp, n_records=n, batch_size=cfg.dp_batch_size, steps=steps)
    rng = random.Random(cfg.seed)
    noise = torch.Generator().manual_seed(cfg.seed + 1)
    for _ in range(steps):
        opt.zero_grad()
        batch = sgd.sample(rng)
        # One loss per pair: PairDPSGD clips each record's gradient on its own.
        sgd.private_gradients(
            [partial(_bt_loss, model, pos[i : i + 1], neg[i : i + 1]) for i in batch], noise
        )
        opt.step()
    return TrainedMlpReward(
        model,
        spent_epsilon=sgd.spent_epsilon(),
        delta=dp.delta,
        noise_multiplier=sgd.noise_multiplier,
        steps=steps,
    )


def mlp_shadow_trainer(
    pairs: MlpPairs, config: MlpRewardConfig, *, dp: DPSettings | None = None
) -> ShadowTrainer[int]:
    """LiRA's shadow trainer: the target's own recipe (DP included: a strong auditor knows it),
    a fresh initialization per shadow (the target's seed is not known)."""
    seeds = itertools.count(config.seed + 1000)

    def train_shadow(train: Sequence[int]) -> PairScorer[int]:
        shadow = config.model_copy(update={"seed": next(seeds)})
        return train_mlp_reward(pairs, train, shadow, dp=dp).scorer(pairs)

    return train_shadow


def overfit_mlp_scores(n: int, *, epochs: int = 300, dim: int = 16) -> tuple[Tensor, Tensor]:
    """Raw rewards (2n,) of the chosen and the rejected responses, first n pairs members, of
    the MLP reward model trained full batch without regularization on the members."""
    pairs = MlpPairs(2 * n, dim=dim)
    return train_mlp_reward(pairs, range(n), MlpRewardConfig(epochs=epochs)).rewards(pairs)
