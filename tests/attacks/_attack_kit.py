"""Shared test material for tests/attacks: small real models, real data, real training."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks import smooth_images
from attacks._membership import PairScorer
from sdk.reward import RewardTrainingConfig

__all__ = [
    "CLIENT",
    "MEMBERS",
    "PairData",
    "Router",
    "build_capture",
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


# ---- a captured consortium: what a server's capture mode writes -------------------------

MEMBERS = ["a", "b", "c"]


def _reward_queries(train: list[Any], held: list[Any]) -> list[Any]:
    """Member a's reward queries in round 2: its training pairs scored far apart (chosen 2,
    rejected -2), the held-out ones close together, as an over-fitted reward model would."""
    from sdk.capture import RewardQuery
    from sdk.router import image_ref

    return [
        RewardQuery(
            image_sha256=image_ref(p.image).sha256,  # the bytes an aligner sends
            prompt=p.prompt,
            response=y,
            score=s,
            member="a",
            round_id=2,
        )
        for i, p in enumerate(train + held)
        for y, s in (
            (p.chosen, 2.0 if i < len(train) else 0.1 * i % 1),
            (p.rejected, -2.0 if i < len(train) else 0.05 * i % 1),
        )
    ]


def build_capture(root: Path, data: Path) -> tuple[Path, dict[str, Any]]:
    """A capture directory at ``root`` from real in-process rounds on ``data``'s pairs.
    Round 1: member a's single-sample FedSGD gradient in the clear (an unmasked round kind).
    Round 2: the SecAgg round of a, b, c (16 responses each, 3 local AdamW epochs), every
    masked input and unmasking share as the server received it. Then the reward queries of
    a's pairs. Returns the directory and each member's ground truth (``MemberTruth``)."""
    from attacks import MemberTruth, capture_round
    from attacks._capture import pooled_embeddings
    from sdk.capture import RoundCapture, write_capture
    from sdk.data import load_pairs
    from sdk.router import (
        EncodedBatch,
        HashingEncoder,
        HashingEncoderConfig,
        LocalTrainingConfig,
        RouterConfig,
        encode_pairs,
    )
    from sdk.router import Router as FedmorRouter
    from sdk.secagg import SecAggConfig

    enc = HashingEncoder(HashingEncoderConfig())
    cfg = RouterConfig(input_dim=enc.dim, d_model=32, num_layers=1, num_heads=2, dim_feedforward=64)
    router = FedmorRouter(cfg, MEMBERS, enc.encoder_id)
    train, held = load_pairs(data / "train"), load_pairs(data / "eval")
    tokens = encode_pairs(enc, train[:1])
    single = EncodedBatch(
        hidden=pooled_embeddings(tokens.hidden[:1], tokens.mask[:1])[:, None],
        mask=torch.ones(1, 1, dtype=torch.bool),
    )
    pool = encode_pairs(enc, held)
    pooled_pool = pooled_embeddings(pool.hidden, pool.mask)
    plain = capture_round(router, [single], [0], setting="plaintext", update="gradient")
    r1 = RoundCapture(
        round_id=1,
        meta=plain.meta,
        before=plain.before,
        plain_updates={"a": plain.after},
        aggregate=plain.after,
        router_version=1,
    )
    batches = [encode_pairs(enc, train[8 * k : 8 * k + 8]) for k in range(3)]  # 16 rows each
    wire: list[object] = []
    agg = capture_round(
        router,
        batches,
        [0, 1, 2],
        setting="aggregate",
        local=LocalTrainingConfig(epochs=3, batch_size=16, lr=1e-3),
        on_message=wire.append,
    )
    n_params = sum(t.numel() for t in agg.before.values())
    r2 = RoundCapture(
        round_id=2,
        meta=agg.meta,
        before=agg.before,
        aggregate=agg.after,
        router_version=2,
        threshold=SecAggConfig().round_params([0, 1, 2], n_params).threshold,
        secagg_ids={m: i + 1 for i, m in enumerate(MEMBERS)},  # protocol_ids: 1..N in order
    )
    for msg in wire:
        r2.record(msg)
    assert set(r2.masked_inputs) == set(r2.unmasking) == set(MEMBERS)
    write_capture(root, rounds=[r1], description="test consortium")
    # Appending later, as a server does after each round.
    write_capture(root, rounds=[r2], reward_queries=_reward_queries(train, held))
    assert agg.truth is not None and plain.truth is not None
    rows = np.cumsum([0, *agg.meta.samples_per_client])
    truth = {
        m: MemberTruth(
            pool=pooled_pool,
            rounds={2: agg.truth[rows[k] : rows[k + 1]], **({1: plain.truth} if m == "a" else {})},
        )
        for k, m in enumerate(MEMBERS)
    }
    return root, truth
