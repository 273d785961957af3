"""Supervised warm-up of the base policy on the public ``policy/warmup`` split, cached on disk.

The policy starts GRPO with partial ability, as the paper's does. The cache key is a hash of the
warm-up config, the base checkpoint's files and the data manifest (query ids, prompts, answers
and image digests), so the demo and every benchmark seed reuse one warm-up.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from sdk.alignment._evaluation import right_option_probabilities
from sdk.data import Query
from sdk.models import Runtime, VLMBundle, encode_batch, load_vlm
from sdk.router import image_digest

__all__ = ["WarmupConfig", "warmup_cache_key", "warmup_policy"]

_DONE = "warmup.json"
_ADDED = ("stop_at_expected", "check_every", "label_noise")


class WarmupConfig(BaseModel):
    """Supervised fine-tuning of the policy on (image, prompt) -> answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Enough steps for the answer format on every category of the warm-up split and partial
    # ability on the hardest ones; far fewer leave some categories answering off format.
    steps: int = Field(default=1600, ge=0)
    batch_size: int = Field(default=16, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    warmup_steps: int = Field(default=10, ge=0)
    seed: int = 0
    # How far a warm-up gets in its steps is chaotic (the same recipe differs by machine). A
    # target makes "partial ability" a setting rather than luck: the warm-up stops at the first
    # check where the validation queries' P(right), averaged per category, reaches it.
    stop_at_expected: float | None = Field(default=None, gt=0, le=1)
    check_every: int = Field(default=50, ge=1)
    # A share of the queries trained on a random option instead of the right one (drawn once
    # per query): a converged policy then hesitates between options where a partly able VLM
    # would, instead of being sure of each answer, right or wrong.
    label_noise: float = Field(default=0.0, ge=0, lt=1)


def _files_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != _DONE):
        h.update(path.relative_to(directory).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def warmup_cache_key(config: WarmupConfig, base_dir: Path, queries: Sequence[Query],
                     validation: Sequence[Query] = ()) -> str:
    """sha256 (first 16 hex) of the config, the base checkpoint and the data manifest (the
    training queries, then the validation queries an early stop reads)."""
    # Fields added later are left out at their defaults (and the early stop's period without a
    # target, where it changes nothing), so the caches made before they existed stay valid.
    unused = {f for f in _ADDED if getattr(config, f) == WarmupConfig.model_fields[f].default}
    if config.stop_at_expected is None:
        unused.add("check_every")
    h = hashlib.sha256(config.model_dump_json(exclude=unused).encode())
    h.update(_files_digest(base_dir).encode())
    for q in (*queries, *validation):
        h.update(json.dumps([q.id, q.prompt, q.answer, list(q.options)]).encode())
        h.update(image_digest(q.image).encode())
    return h.hexdigest()[:16]


def _answer_labels(batch_ids: torch.Tensor, prompt_lengths: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """Labels (B, T): input ids on answer tokens, -100 on the prompt and padding (right-padded)."""
    positions = torch.arange(batch_ids.shape[1]).unsqueeze(0)  # (1, T)
    keep = (positions >= prompt_lengths.unsqueeze(1)) & mask.bool()
    return torch.where(keep, batch_ids, torch.full_like(batch_ids, -100))


def _noisy_answers(queries: Sequence[Query], noise: float, seed: int) -> list[str]:
    """The answer each query is trained on: a random option for a ``noise`` share of the
    multiple-choice ones (it may be the right one), the right answer otherwise."""
    rng = random.Random(f"label-noise-{seed}")
    return [rng.choice(q.options) if q.options and rng.random() < noise else str(q.answer)
            for q in queries]


def _validation_accuracy(bundle: VLMBundle, validation: Mapping[str, Sequence[Query]]) -> float:
    """Mean over categories of the mean P(right option) (noise-free, teacher-forced)."""
    return sum(float(right_option_probabilities(bundle, qs).mean())
               for qs in validation.values()) / len(validation)


def _train(bundle: VLMBundle, usable: Sequence[Query], targets: Sequence[str], cfg: WarmupConfig,
           checked: Mapping[str, Sequence[Query]], say: Callable[[str], None]
           ) -> tuple[list[float], list[tuple[int, float]]]:
    """Supervised steps on ``usable`` (answers ``targets``) until ``cfg.steps`` or the target;
    the losses, and (steps done, validation P(right)) at each check."""
    model, processor = bundle.model, bundle.processor
    target = cfg.stop_at_expected
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps))
    )
    model.train()
    losses: list[float] = []
    reached: list[tuple[int, float]] = []  # (steps done, validation P(right)) at each check
    for step in range(cfg.steps):
        picked = rng.sample(range(len(usable)), min(cfg.batch_size, len(usable)))
        batch = [usable[i] for i in picked]
        images = [q.image for q in batch]
        prompts = [q.prompt for q in batch]
        answers = [targets[i] for i in picked]
        full = encode_batch(processor, images, prompts, answers, max_length=bundle.max_length)
        prompt_only = encode_batch(processor, images, prompts, max_length=bundle.max_length)
        labels = _answer_labels(full["input_ids"], prompt_only["attention_mask"].sum(1),
                                full["attention_mask"])
        full, labels = full.to(model.device), labels.to(model.device)
        loss = model(**full, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == cfg.steps - 1:
            say(f"warm-up step {step + 1}/{cfg.steps} loss {losses[-1]:.3f}")
        if target is not None and (step + 1) % cfg.check_every == 0:
            reached.append((step + 1, _validation_accuracy(bundle, checked)))
            model.train()  # the check's teacher forcing switched it to eval
            say(f"warm-up step {step + 1}: validation P(right) {reached[-1][1]:.3f}")
            if reached[-1][1] >= target:
                say(f"warm-up: stopped at step {step + 1} (target {target})")
                break
    return losses, reached


def warmup_policy(
    base_dir: str | Path,
    queries: Sequence[Query],
    cache_root: str | Path,
    config: WarmupConfig | None = None,
    *,
    validation: Mapping[str, Sequence[Query]] | None = None,
    progress: Callable[[str], None] | None = None,
    runtime: Runtime | None = None,
) -> Path:
    """Fine-tune ``base_dir`` on the answers of ``queries``; return the (cached) policy dir.

    With ``config.stop_at_expected``, ``validation`` (multiple-choice queries by category, not
    the evaluation's) decides when to stop. The policy trains on ``runtime``'s device in its
    dtype; a dtype other than float32 is part of the cache key."""
    cfg = config or WarmupConfig()
    base = Path(base_dir)
    usable = [q for q in queries if q.answer is not None]
    if not usable:
        raise ValueError("warm-up needs queries with answers (the policy/warmup split)")
    target = cfg.stop_at_expected
    # Without a target the validation queries would change nothing but the cache key.
    checked = {c: list(qs) for c, qs in (validation or {}).items() if qs} \
        if target is not None else {}
    if target is not None and not checked:
        raise ValueError("WarmupConfig.stop_at_expected needs validation queries")
    flat = [q for qs in checked.values() for q in qs]
    key = warmup_cache_key(cfg, base, usable, flat)
    dtype = (runtime or Runtime()).resolve().dtype
    if dtype != torch.float32:  # float32 keys stay what they were, so old caches stay valid
        key = hashlib.sha256(f"{key}:{dtype}".encode()).hexdigest()[:16]
    out = Path(cache_root) / f"warmup-{key}"
    say = progress or (lambda _m: None)
    if (out / _DONE).is_file():
        say(f"warm-up: cached at {out}")
        return out
    targets = _noisy_answers(usable, cfg.label_noise, cfg.seed)
    bundle = load_vlm(base, runtime=runtime)
    losses, reached = _train(bundle, usable, targets, cfg, checked, say)
    bundle.model.eval()
    _publish(out, bundle, {"config": cfg.model_dump(), "losses": losses,
                           "steps_done": len(losses), "validation_expected": reached})
    return out


def _publish(out: Path, bundle: VLMBundle, record: dict[str, object]) -> None:
    """Save the trained policy and ``record`` (the cache entry's marker) as folder ``out``:
    into a fresh folder, renamed into place once complete. mkdir fails on any name that exists
    (a planted link, a crashed run's half-saved folder), so nothing is written through one;
    the folder keeps a new folder's usual mode, so a shared cache stays readable."""
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(8)}.tmp")
    tmp.mkdir(parents=True)
    try:
        bundle.model.save_pretrained(tmp)
        bundle.processor.save_pretrained(tmp)
        (tmp / _DONE).write_text(json.dumps(record))
        try:
            tmp.rename(out)
        except OSError:
            if not (out / _DONE).is_file():
                raise
            # another process finished first: keep theirs
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
