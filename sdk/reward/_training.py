"""Bradley-Terry training of a client's reward model, and pairwise accuracy."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.nn.functional as F

from sdk.progress import Steps
from sdk.reward._best import BestWeights, write_curve
from sdk.reward._config import RewardTrainingConfig
from sdk.reward._dp import PairDPSGD
from sdk.reward._model import PairLike, RewardModel, length_bucket
from sdk.reward._scorer import ScoreNormalizer

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
    """What one training run produced. ``eval_accuracy`` is the kept model's (the best
    evaluation's, from ``best_step``); ``steps`` the optimizer steps run (fewer than planned
    when ``stopped_early``)."""

    history: list[dict[str, float]]
    eval_accuracy: float | None
    wall_s: float
    steps: int
    spent_epsilon: float | None = None
    noise_multiplier: float | None = None
    normalizer: ScoreNormalizer | None = None
    checkpoint: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    best_step: int | None = None
    stopped_early: bool = False


def _pair_rows(pairs: Sequence[PairLike]) -> tuple[list[Any], list[str], list[str]]:
    # 2B rows: chosen responses first, then rejected ones.
    return ([p.image for p in pairs] * 2, [p.prompt for p in pairs] * 2,
            [p.chosen for p in pairs] + [p.rejected for p in pairs])


def _pair_loss(model: RewardModel, pairs: Sequence[PairLike],
               batch: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    rewards = model.rewards(*_pair_rows(pairs), batch=batch)  # (2B,)
    return bradley_terry_loss(rewards[: len(pairs)], rewards[len(pairs) :])


def _backward_pair_loss(model: RewardModel, pairs: Sequence[PairLike]) -> float:
    """Backpropagate the batch's Bradley-Terry loss; return its value.

    One backward over all 2B rows when one forward takes them (``model.rows_per_forward``);
    else micro-batches of whole pairs (a pair's loss needs both its rewards), each loss
    weighted by its share of the batch, so the summed gradients are the batch's. Rows too long
    to share a forward (LLaVA-OneVision's 1,583-token rows at real size) go through
    :func:`_backward_rows_apart`, so one row's checkpointed layer inputs are held at a time.
    """
    batch = model.encode(*_pair_rows(pairs))
    tokens = batch["input_ids"].shape[1]
    rows = model.rows_per_forward(tokens)
    if rows >= 2 * len(pairs):
        loss = _pair_loss(model, pairs, batch)
        loss.backward()
        return float(loss.detach())
    del batch
    if rows == 1:
        return sum(_backward_rows_apart(model, pair, 1 / len(pairs), length_bucket(tokens))
                   for pair in pairs)
    total = 0.0
    for start in range(0, len(pairs), rows // 2):
        group = pairs[start : start + rows // 2]
        loss = _pair_loss(model, group) * (len(group) / len(pairs))
        loss.backward()
        total += float(loss.detach())
    return total


def _backward_rows_apart(model: RewardModel, pair: PairLike, weight: float, multiple: int
                         ) -> float:
    """Backpropagate one pair's loss (times ``weight``) holding one row's graph at a time; each
    row is padded to a multiple of ``multiple`` tokens, as :meth:`RewardModel.rewards` pads a
    row that goes alone.

    The chosen row goes forward with its graph; the rejected row's reward, which its gradient
    needs, comes from a forward without one; the chosen row's backward frees its graph before
    the rejected row, encoded once, goes forward again with its own. The extra forward trades
    a step's time for the checkpointed layer inputs of one row (docs/hardware.md). The graph-free forward runs on a forked RNG, so the graphed one draws the
    same dropout and the gradient is exactly the pair's.
    """
    image, prompt = [pair.image], [pair.prompt]
    chosen = model(model.encode(image, prompt, [pair.chosen], pad_to_multiple_of=multiple))
    rejected_row = model.encode(image, prompt, [pair.rejected], pad_to_multiple_of=multiple)
    device = model.device
    with (torch.random.fork_rng(devices=[] if device.type == "cpu" else [device],
                                device_type=device.type), torch.no_grad()):
        rejected = model(rejected_row)
    loss = bradley_terry_loss(chosen, rejected) * weight
    loss.backward()
    (bradley_terry_loss(chosen.detach(), model(rejected_row)) * weight).backward()
    return float(loss.detach())


def _lr_factor(step: int, warmup: int, total: int) -> float:
    # Linear warm-up, then cosine decay to 10% of the peak.
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def _fit_normalizer(model: RewardModel, pairs: Sequence[PairLike], config: RewardTrainingConfig
                    ) -> ScoreNormalizer:
    scores = model.score(*_pair_rows(pairs), batch_size=config.eval_batch_size)
    return ScoreNormalizer.fit(scores, clip=config.clip_bound)


class _Batches:
    """Training batches in the run's seeded order: shuffled epochs without DP, Poisson-style
    samples (the accountant's) with it."""

    def __init__(self, pairs: Sequence[PairLike], batch_size: int, rng: random.Random,
                 dp: PairDPSGD | None) -> None:
        self.pairs, self.batch_size, self.rng, self.dp = pairs, batch_size, rng, dp
        self._order: list[int] = []

    def next(self) -> list[PairLike]:
        if self.dp is not None:
            return [self.pairs[i] for i in self.dp.sample(self.rng)]
        if len(self._order) < self.batch_size:
            self._order += self.rng.sample(range(len(self.pairs)), len(self.pairs))
        batch = [self.pairs[i] for i in self._order[: self.batch_size]]
        del self._order[: self.batch_size]
        return batch


def _check_lora(model: RewardModel, config: RewardTrainingConfig) -> None:
    if config.lora is not None and config.lora != model.lora:
        # Adapters are injected when the model is built; training cannot add or change them.
        raise ValueError(
            f"config.lora={config.lora!r} but the model was built with lora={model.lora!r}: "
            "build it with RewardModel.from_backbone(path, lora=config.lora)"
        )


def _train_step(model: RewardModel, batch: list[PairLike], optimizer: torch.optim.Optimizer,
                params: list[torch.nn.Parameter], config: RewardTrainingConfig,
                dp: PairDPSGD | None, generator: torch.Generator) -> float:
    """One optimizer step on ``batch``; returns its loss. Under DP the gradient is the
    clipped, noised sum of per-pair gradients."""
    optimizer.zero_grad(set_to_none=True)
    if dp is None:
        loss_value = _backward_pair_loss(model, batch)
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    else:
        loss_value = dp.private_gradients(
            [partial(_pair_loss, model, [pair]) for pair in batch], generator
        )
    optimizer.step()
    return loss_value


def _evaluate(model: RewardModel, eval_pairs: Sequence[PairLike], config: RewardTrainingConfig
              ) -> float:
    accuracy = pairwise_accuracy(model, eval_pairs, batch_size=config.eval_batch_size)
    model.train()
    return accuracy


def _save(model: RewardModel, out_dir: str | Path, config: RewardTrainingConfig, *,
          result: RewardTrainingResult, planned: int) -> Path:
    # "config" is the whole recipe: an auditor's LiRA shadows train with it (attacks).
    evals = [h for h in result.history if "eval_accuracy" in h]
    checkpoint = model.save_pretrained(out_dir, extra={"training": {
        "steps": result.steps, "planned_steps": planned, "seed": config.seed,
        "eval_accuracy": result.eval_accuracy, "best_step": result.best_step,
        "last_eval_accuracy": evals[-1]["eval_accuracy"] if evals else None,
        "stopped_early": result.stopped_early,
        "spent_epsilon": result.spent_epsilon,
        "dp": None if config.dp is None else config.dp.model_dump(),
        "config": config.model_dump(mode="json"),
    }})
    if result.normalizer is not None:
        result.normalizer.save(checkpoint)
    write_curve(checkpoint, result.history, best_step=result.best_step)
    return checkpoint


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
    ``config.dp``. With eval pairs, the weights of the best evaluation (``config.eval_every``,
    ``config.patience``) are put back into ``model`` at the end, and the normalizer is fitted
    on them; the last step's weights are not kept. With ``out_dir`` the kept model, its
    normalizer and the learning curve (``curve.csv``, ``curve.png``) are saved there once, at
    the end, with the best step in ``reward_config.json``. The model trains where it was loaded
    (``RewardModel.from_backbone(..., runtime=...)``), in its dtype. ``progress`` shows a bar
    (on a terminal) and a step line every 10 steps on stderr (or ``stream``), unless quiet
    mode (``sdk.progress``) is on.
    """
    config = config or RewardTrainingConfig()
    if not train_pairs:
        raise ValueError("train_reward_model needs at least one training pair")
    _check_lora(model, config)
    torch.manual_seed(config.seed)
    total = config.total_steps(len(train_pairs))
    params = [p for p in model.parameters() if p.requires_grad]
    dp = None if config.dp is None else PairDPSGD(
        params, config.dp, n_records=len(train_pairs), batch_size=config.batch_size, steps=total)
    best = BestWeights(config.patience)
    start = time.perf_counter()
    history = _run(model, train_pairs, eval_pairs, config, params, dp, best,
                   progress=progress, stream=stream)
    best.restore(model)  # the normalizer and the checkpoint are the kept model's
    model.eval()
    wall = time.perf_counter() - start
    result = RewardTrainingResult(
        history=history, eval_accuracy=best.accuracy, wall_s=wall, steps=len(history),
        spent_epsilon=None if dp is None else dp.spent_epsilon(),
        noise_multiplier=None if dp is None else dp.noise_multiplier,
        normalizer=_fit_normalizer(model, train_pairs, config) if config.fit_normalizer else None,
        best_step=best.step, stopped_early=len(history) < total,
    )
    if out_dir is not None:
        result.checkpoint = _save(model, out_dir, config, result=result, planned=total)
    return result


def _run(model: RewardModel, train_pairs: Sequence[PairLike], eval_pairs: Sequence[PairLike],
         config: RewardTrainingConfig, params: list[torch.nn.Parameter], dp: PairDPSGD | None,
         best: BestWeights, *, progress: bool, stream: TextIO | None) -> list[dict[str, float]]:
    """The optimizer steps, with an evaluation every ``eval_interval`` steps and at the last
    (each offered to ``best``); stops when ``best`` runs out of patience. Returns the history."""
    rng = random.Random(config.seed)
    generator = torch.Generator().manual_seed(config.seed + 1)
    total = config.total_steps(len(train_pairs))
    every = config.eval_interval(total)
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    batches = _Batches(train_pairs, config.batch_size, rng, dp)
    history: list[dict[str, float]] = []
    name = f"[rm {model.architecture}]"
    model.train()
    with Steps(name, total, enabled=progress, stream=stream) as steps:
        for step in range(1, total + 1):
            lr = config.lr * _lr_factor(step - 1, config.warmup_steps, total)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = _train_step(model, batches.next(), optimizer, params, config, dp, generator)
            record: dict[str, float] = {"step": step, "loss": loss, "lr": lr}
            history.append(record)
            steps.advance()
            note = ""
            if eval_pairs and (step == total or (every and step % every == 0)):
                accuracy = record["eval_accuracy"] = _evaluate(model, eval_pairs, config)
                note = f" eval_acc {accuracy:.3f}" + (
                    " (best)" if best.offer(model, step, accuracy)
                    else f" (best {best.accuracy:.3f} at step {best.step})")
            if step == total or note or step % 10 == 1:
                steps.line(f"{name} step {step}/{total} loss {loss:.4f}{note}")
            if best.exhausted:
                steps.line(f"{name} stopped at step {step}: no better eval accuracy in "
                           f"{best.patience} evaluations; keeping step {best.step}")
                break
    return history
