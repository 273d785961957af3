"""Optimization-based gradient inversion (DLG / Inverting Gradients) matching a captured update.

The attacker holds the model weights the client started from, the update the client sent and
the labels (for the router the label is the client's one-hot, so it is known). It optimizes a
dummy input so that the update it would produce matches the captured one in cosine distance,
with Adam and (for images) a total-variation prior and a [0, 1] box constraint.

Multi-step local training is handled by matching the update: the E local SGD steps are replayed
differentiably with ``torch.func.functional_call`` on the dummy batch and the resulting parameter
delta is compared with the captured delta (Geiping et al. 2020, section 5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch.func import functional_call

from attacks._errors import AttackInputError

__all__ = [
    "CapturedUpdate",
    "InversionCheckpoint",
    "InversionConfig",
    "InversionResult",
    "LossFn",
    "UpdateKind",
    "compute_update",
    "infer_label",
    "invert_update",
    "total_variation",
]

# loss_fn(outputs, labels) -> scalar; e.g. cross-entropy, or BCE-with-logits against a one-hot.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""A loss ``(outputs, targets) -> scalar`` the attacked model was trained with."""


class UpdateKind(str, Enum):
    """What the client sent: a gradient, or a parameter delta after local SGD steps."""

    GRADIENT = "gradient"
    DELTA = "delta"


@dataclass(frozen=True)
class CapturedUpdate:
    """An update as seen on the wire, keyed like ``model.named_parameters()``.

    For ``DELTA``, ``tensors`` is params_after - params_before after ``local_steps`` full-batch
    SGD steps with learning rate ``local_lr``."""

    tensors: Mapping[str, torch.Tensor]
    kind: UpdateKind = UpdateKind.GRADIENT
    local_steps: int = 1
    local_lr: float = 0.0

    def __post_init__(self) -> None:
        if not self.tensors:
            raise AttackInputError("the captured update holds no tensors")
        if self.kind is UpdateKind.DELTA and (self.local_steps < 1 or self.local_lr <= 0):
            raise AttackInputError(
                f"a delta update needs local_steps >= 1 and local_lr > 0, got "
                f"{self.local_steps} and {self.local_lr}"
            )


class InversionConfig(BaseModel):
    """Settings of :func:`invert_update`; the defaults follow Inverting Gradients."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    checkpoints: tuple[int, ...] = (1000, 5000, 8000)
    lr: float = Field(default=0.1, gt=0)
    input_kind: Literal["image", "embedding"] = "image"
    tv_weight: float = Field(default=1e-4, ge=0)
    signed_gradients: bool = True
    lr_decay: bool = True
    init_scale: float = Field(default=1.0, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _sorted_checkpoints(self) -> InversionConfig:
        cps = self.checkpoints
        if not cps or any(c < 1 for c in cps) or list(cps) != sorted(set(cps)):
            raise ValueError(f"checkpoints must be increasing positive steps, got {cps}")
        return self

    @property
    def steps(self) -> int:
        """Total optimization steps (the last checkpoint)."""
        return self.checkpoints[-1]


@dataclass(frozen=True)
class InversionCheckpoint:
    """The reconstruction after ``step`` steps, and the update-matching loss there."""

    step: int
    reconstruction: torch.Tensor
    match_loss: float


@dataclass(frozen=True)
class InversionResult:
    """Reconstructions at each configured checkpoint, in step order."""

    checkpoints: list[InversionCheckpoint] = field(default_factory=list)

    @property
    def final(self) -> InversionCheckpoint:
        """The reconstruction after the last step."""
        return self.checkpoints[-1]


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels of a (N, C, H, W) batch."""
    dx = (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean()
    dy = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean()
    return dx + dy


def _simulate(
    model: nn.Module,
    names: Sequence[str],
    loss_fn: LossFn,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    kind: UpdateKind,
    local_steps: int,
    local_lr: float,
    create_graph: bool,
) -> list[torch.Tensor]:
    """The update ``model`` would send for (inputs, labels), one tensor per name in ``names``.
    Parameters not in ``names`` and buffers are held at their current values."""
    state: dict[str, torch.Tensor] = {k: v.detach() for k, v in model.named_parameters()}
    # Buffers are cloned: a BatchNorm in train mode must not move the model's running stats.
    state.update({k: v.detach().clone() for k, v in model.named_buffers()})
    start = [state[n].requires_grad_(True) for n in names]
    current = list(start)
    steps = 1 if kind is UpdateKind.GRADIENT else local_steps
    grads: list[torch.Tensor] = []
    for _ in range(steps):
        out = functional_call(model, {**state, **dict(zip(names, current, strict=True))}, (inputs,))
        loss = loss_fn(out, labels)
        grads = list(torch.autograd.grad(loss, current, create_graph=create_graph))
        if kind is UpdateKind.DELTA:
            current = [p - local_lr * g for p, g in zip(current, grads, strict=True)]
    if kind is UpdateKind.GRADIENT:
        return grads
    return [c - s for c, s in zip(current, start, strict=True)]


def compute_update(
    model: nn.Module,
    loss_fn: LossFn,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    *,
    kind: UpdateKind = UpdateKind.GRADIENT,
    local_steps: int = 1,
    local_lr: float = 0.0,
    param_names: Sequence[str] | None = None,
) -> CapturedUpdate:
    """What a client sends after training on (inputs, labels): same code path the attack
    replays. ``param_names`` restricts it to the trainable part (e.g. the router only)."""
    names = (
        list(param_names) if param_names is not None else [n for n, _ in model.named_parameters()]
    )
    tensors = _simulate(model, names, loss_fn, inputs, labels, kind, local_steps, local_lr, False)
    return CapturedUpdate(
        tensors={n: t.detach() for n, t in zip(names, tensors, strict=True)},
        kind=kind,
        local_steps=local_steps,
        local_lr=local_lr,
    )


def infer_label(update: CapturedUpdate, bias_key: str) -> int:
    """Infer the label of a single sample from the last layer's bias update (iDLG): with a
    softmax cross-entropy or a BCE-vs-one-hot loss only the true class has a negative bias
    gradient (a positive delta, since a delta is minus lr times gradients)."""
    if bias_key not in update.tensors:
        raise AttackInputError(f"the update has no entry {bias_key!r}")
    b = update.tensors[bias_key].reshape(-1)
    idx = b.argmax() if update.kind is UpdateKind.DELTA else b.argmin()
    return int(idx)


def _init_dummy(shape: Sequence[int], cfg: InversionConfig) -> torch.Tensor:
    gen = torch.Generator().manual_seed(cfg.seed)
    if cfg.input_kind == "image":
        x = 0.5 + cfg.init_scale * 0.25 * torch.randn(tuple(shape), generator=gen)
        return x.clamp(0.0, 1.0)
    return cfg.init_scale * torch.randn(tuple(shape), generator=gen)


def _replay(
    model: nn.Module,
    names: Sequence[str],
    loss_fn: LossFn,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    update: CapturedUpdate,
    sizes: Sequence[int],
) -> list[torch.Tensor]:
    """The (summed) update the dummy batch would produce, differentiable w.r.t. ``inputs``."""
    total: list[torch.Tensor] = []
    for xs, ys in zip(inputs.split(list(sizes)), labels.split(list(sizes)), strict=True):
        one = _simulate(
            model, names, loss_fn, xs, ys, update.kind, update.local_steps, update.local_lr, True
        )
        total = one if not total else [a + b for a, b in zip(total, one, strict=True)]
    return total


def invert_update(
    model: nn.Module,
    update: CapturedUpdate,
    *,
    input_shape: Sequence[int],
    labels: torch.Tensor,
    loss_fn: LossFn,
    config: InversionConfig | None = None,
    client_sizes: Sequence[int] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> InversionResult:
    """Reconstruct a batch of inputs, shape ``input_shape`` (e.g. (1, 3, 16, 16) images or
    (1, D) embeddings), whose replayed update best matches ``update`` in cosine distance.

    ``client_sizes`` models an aggregate: the update is taken as the sum of one update per
    client, client k training on the next ``client_sizes[k]`` rows of the batch (the router's
    labels are per-client one-hots, so an attacker can group rows by label). None: one client.
    """
    cfg = config or InversionConfig()
    sizes = list(client_sizes) if client_sizes is not None else [int(input_shape[0])]
    if sum(sizes) != input_shape[0] or min(sizes) < 1:
        raise AttackInputError(f"client_sizes {sizes} must be positive and sum to {input_shape[0]}")
    params = dict(model.named_parameters())
    names = list(update.tensors)
    unknown = [n for n in names if n not in params]
    if unknown:
        raise AttackInputError(f"update entries not among the model's parameters: {unknown}")
    target = torch.cat([update.tensors[n].detach().reshape(-1) for n in names])
    if float(target.norm()) == 0.0:
        raise AttackInputError("the captured update is all zeros")
    dummy = _init_dummy(input_shape, cfg).requires_grad_(True)
    opt = torch.optim.Adam([dummy], lr=cfg.lr)
    milestones = [int(cfg.steps * f) for f in (3 / 8, 5 / 8, 7 / 8)] if cfg.lr_decay else []
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    wanted = set(cfg.checkpoints)
    result = InversionResult()
    for step in range(1, cfg.steps + 1):
        opt.zero_grad()
        sim = _replay(model, names, loss_fn, dummy, labels, update, sizes)
        flat = torch.cat([s.reshape(-1) for s in sim])
        match = 1.0 - torch.nn.functional.cosine_similarity(flat, target, dim=0)
        loss = match
        if cfg.input_kind == "image" and cfg.tv_weight > 0:
            loss = loss + cfg.tv_weight * total_variation(dummy)
        (dummy.grad,) = torch.autograd.grad(loss, [dummy])
        if cfg.signed_gradients:
            dummy.grad.sign_()
        opt.step()
        sched.step()
        if cfg.input_kind == "image":
            with torch.no_grad():
                dummy.clamp_(0.0, 1.0)
        if step in wanted:
            result.checkpoints.append(
                InversionCheckpoint(step, dummy.detach().clone(), float(match.detach()))
            )
            if progress is not None:
                progress(step, float(match.detach()))
    return result
