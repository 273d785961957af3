"""Table 1's shared models: the offline router and the FedAvg-RM baseline's reward model."""

from __future__ import annotations

import statistics
from pathlib import Path

from sdk.alignment import train_fedavg_reward_model
from sdk.data import load_pairs
from sdk.models import build_tiny_vlm
from sdk.reward import ClientScorer, RewardTrainingConfig
from sdk.router import (
    HashingEncoder,
    Router,
    RouterConfig,
    default_federated_config,
    fedavg_plain,
    train_router_locally,
)


def router_config(encoder: HashingEncoder) -> RouterConfig:
    """The demo's router (examples/fedmor_local/_demo_config.py): 2 layers, d_model 64."""
    return RouterConfig(input_dim=encoder.dim, d_model=64, num_layers=2, num_heads=4,
                        dim_feedforward=128)


def train_router(pair_dirs: dict[str, Path], encoder: HashingEncoder, rounds: int,
                 epochs: int, max_pairs: int = 300) -> Router:
    """The library's federated recipe (``default_federated_config``: lr 3e-3 decayed by a
    cosine over the rounds) with ``epochs`` local epochs, every client in every round."""
    router = Router(router_config(encoder), list(pair_dirs), encoder.encoder_id)
    encoded = []
    for pair_dir in pair_dirs.values():
        pairs = load_pairs(pair_dir)[:max_pairs]
        images = [p.image for p in pairs] * 2
        prompts = [p.prompt for p in pairs] * 2
        responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
        encoded.append(encoder.encode(images, prompts, responses))
    recipe = default_federated_config(rounds=rounds)
    for r in range(rounds):
        updates = [train_router_locally(router, batch, k, recipe.local_config(r, k).model_copy(
            update={"epochs": epochs})) for k, batch in enumerate(encoded)]
        router.set_flat_params(fedavg_plain(updates))
    return router


def fedavg_reward_model(pair_dirs: dict[str, Path], out: Path,
                        quick: bool) -> tuple[ClientScorer, dict[str, float]]:
    """The FedAvg-RM baseline's shared model and its pairwise accuracy per client."""
    pairs = [load_pairs(d) for d in pair_dirs.values()]
    backbone = build_tiny_vlm("qwen2_vl", out / f"fedavg-backbone-{len(pairs)}",
                              corpus=[p.prompt for ps in pairs for p in ps]
                              + [r for ps in pairs for p in ps for r in (p.chosen, p.rejected)])
    config = RewardTrainingConfig(steps=15 if quick else 60, batch_size=16, warmup_steps=5)
    scorer = train_fedavg_reward_model(backbone, pairs, rounds=3 if quick else 5, config=config)
    accuracy = {}
    for c, pair_dir in pair_dirs.items():
        ev = load_pairs(pair_dir.parent / "eval")
        args = [p.image for p in ev], [p.prompt for p in ev]
        chosen, rejected = scorer.score(*args, [p.chosen for p in ev]), \
            scorer.score(*args, [p.rejected for p in ev])
        accuracy[c] = statistics.fmean(float(a > b) for a, b in zip(chosen, rejected, strict=True))
    return scorer, accuracy
