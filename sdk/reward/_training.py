"""Bradley-Terry training of a client's reward model, and pairwise accuracy."""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.nn.functional as F

from sdk.reward._config import RewardTrainingConfig
from sdk.reward._dp import PairDPSGD
from sdk.reward._model import PairLike, RewardModel
from sdk.reward._normalizer import ScoreNormalizer

__all__ = [
    "RewardTrainingResult",
    "bradley_terry_loss",
    "pairwise_accuracy",
    "train_reward_model",
]


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log sigmoid(R(x, y+) - R(x, y-))`` over pairs; inputs are (B,)."""
    return -F.logsigmoid(chosen - rejected).mean()


@torch.no_grad()
def pairwise_accuracy(model: RewardModel, pairs: Sequence[PairLike], *, batch_size: int = 64
                      ) -> float:
    """Fraction of pairs with R(chosen) > R(rejected); a tie counts one half."""
    if not pairs:
        raise ValueError("pairwise_accuracy needs at least one pair")
    images = [p.image for p in pairs]
    prompts = [p.prompt for p in pairs]
    chosen = model.score(images, prompts, [p.chosen for p in pairs], batch_size=batch_size)
    rejected = model.score(images, prompts, [p.rejected for p in pairs], batch_size=batch_size)
    wins = (chosen > rejected).double() + 0.5 * (chosen == rejected).double()
    return float(wins.mean())


@dataclass
class RewardTrainingResult:
    """What one training run produced."""

    history: list[dict[str, float]]
    eval_accuracy: float | None
    wall_s: float
    steps: int
    spent_epsilon: float | None = None
    noise_multiplier: float | None = None
    normalizer: ScoreNormalizer | None = None
    checkpoint: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _pair_loss(model: RewardModel, pairs: Sequence[PairLike]) -> torch.Tensor:
    # One forward over 2B rows: chosen responses first, then rejected ones.
    images = [p.image for p in pairs] * 2
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    rewards = model(model.encode(images, prompts, responses))  # (2B,)
    return bradley_terry_loss(rewards[: len(pairs)], rewards[len(pairs) :])


def _lr_factor(step: int, warmup: int, total: int) -> float:
    # Linear warm-up, then cosine decay to 10% of the peak.
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def _fit_normalizer(model: RewardModel, pairs: Sequence[PairLike], config: RewardTrainingConfig
                    ) -> ScoreNormalizer:
    images = [p.image for p in pairs] * 2
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    scores = model.score(images, prompts, responses, batch_size=config.eval_batch_size)
    return ScoreNormalizer.fit(scores, clip=config.clip_bound)


def train_reward_model(
    model: RewardModel,
    train_pairs: Sequence[PairLike],
    eval_pairs: Sequence[PairLike],
    config: RewardTrainingConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    stream: TextIO | None = None,
) -> RewardTrainingResult:
    """Train ``model`` with the Bradley-Terry loss; evaluate, checkpoint and fit the normalizer.

    LoRA must already be set on the model (``RewardModel(..., lora=...)``): a ``config.lora``
    other than the model's raises ValueError, and None accepts the model's. DP-SGD comes from
    ``config.dp``. With ``out_dir`` the model and normalizer are saved there once, at the end
    (evaluations do not rewrite the checkpoint). The model trains where it was loaded
    (``RewardModel.from_backbone(..., runtime=...)``), in its dtype.
    """
    config = config or RewardTrainingConfig()
    if not train_pairs:
        raise ValueError("train_reward_model needs at least one training pair")
    if config.lora is not None and config.lora != model.lora:
        # Adapters are injected when the model is built; training cannot add or change them.
        raise ValueError(
            f"config.lora={config.lora!r} but the model was built with lora={model.lora!r}: "
            "build it with RewardModel.from_backbone(path, lora=config.lora)"
        )
    out = stream or sys.stderr
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    generator = torch.Generator().manual_seed(config.seed + 1)
    total = config.total_steps(len(train_pairs))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    dp = None
    if config.dp is not None:
        dp = PairDPSGD(params, config.dp, n_records=len(train_pairs),
                       batch_size=config.batch_size, steps=total)
    history: list[dict[str, float]] = []
    order: list[int] = []
    eval_acc: float | None = None
    start = time.perf_counter()
    model.train()
    for step in range(total):
        for group in optimizer.param_groups:
            group["lr"] = config.lr * _lr_factor(step, config.warmup_steps, total)
        optimizer.zero_grad(set_to_none=True)
        if dp is None:
            if len(order) < config.batch_size:
                order += rng.sample(range(len(train_pairs)), len(train_pairs))
            batch = [train_pairs[i] for i in order[: config.batch_size]]
            del order[: config.batch_size]
            loss = _pair_loss(model, batch)
            loss.backward()
            if config.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            loss_value = float(loss.detach())
        else:
            batch = [train_pairs[i] for i in dp.sample(rng)]
            loss_value = dp.private_gradients(
                [partial(_pair_loss, model, [pair]) for pair in batch], generator
            )
        optimizer.step()
        record: dict[str, float] = {"step": step + 1, "loss": loss_value,
                                    "lr": optimizer.param_groups[0]["lr"]}
        last = step + 1 == total
        if eval_pairs and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
            eval_acc = pairwise_accuracy(model, eval_pairs, batch_size=config.eval_batch_size)
            record["eval_accuracy"] = eval_acc
            model.train()
        history.append(record)
        if progress and (last or record.get("eval_accuracy") is not None or step % 10 == 0):
            acc = record.get("eval_accuracy")
            print(f"[rm {model.architecture}] step {step + 1}/{total} loss {loss_value:.4f}"
                  + ("" if acc is None else f" eval_acc {acc:.3f}"), file=out, flush=True)
    model.eval()
    wall = time.perf_counter() - start
    normalizer = _fit_normalizer(model, train_pairs, config) if config.fit_normalizer else None
    spent = dp.spent_epsilon() if dp is not None else None
    checkpoint = None
    if out_dir is not None:
        # "config" is the whole recipe: an auditor's LiRA shadows train with it (attacks).
        checkpoint = model.save_pretrained(out_dir, extra={"training": {
            "steps": total, "seed": config.seed, "eval_accuracy": eval_acc,
            "spent_epsilon": spent, "dp": None if config.dp is None else config.dp.model_dump(),
            "config": config.model_dump(mode="json"),
        }})
        if normalizer is not None:
            normalizer.save(checkpoint)
    return RewardTrainingResult(
        history=history, eval_accuracy=eval_acc, wall_s=wall, steps=total, spent_epsilon=spent,
        noise_multiplier=None if dp is None else dp.noise_multiplier, normalizer=normalizer,
        checkpoint=checkpoint,
    )
