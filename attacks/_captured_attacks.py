"""Gradient inversion against a captured router update (a file in the format of _captured.py).

Two attacks on what the server saw, each scored against the true embeddings beside the trivial
baselines: the analytic attack on the router's first linear layer (``input_proj``), and the
optimization attack (Inverting Gradients in embedding space: dummy token sequences whose router
gradient matches the update in cosine distance). The attacker knows the round's starting router,
the router architecture, which clients took part (hence their one-hot labels), how many samples
each used and the encoder's token count; it never reads ``truth``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attacks._analytic import analytic_linear_inversion
from attacks._captured import CapturedRouterUpdate
from attacks._errors import AttackInputError
from attacks._inversion import CapturedUpdate, InversionConfig, UpdateKind, invert_update
from attacks._report import ReconstructionReport, reconstruction_report

__all__ = ["CapturedAttackConfig", "attack_captured_update"]


class CapturedAttackConfig(BaseModel):
    """Settings of :func:`attack_captured_update`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(default=300, ge=1, description="optimization-attack steps")
    lr: float = Field(default=0.05, gt=0)
    max_dummies: int = Field(
        default=8,
        ge=1,
        description="reconstruct every sample when there are at most this many; otherwise one "
        "per client (credited with its best-matching true sample)",
    )
    seed: int = 0


class _TokenRouter(nn.Module):
    """The router on (B, T, D) token sequences with every token real: the attack's model."""

    def __init__(self, router: nn.Module) -> None:
        super().__init__()
        self.router = router

    def forward(self, hidden: Tensor) -> Tensor:
        mask = torch.ones(hidden.shape[:2], dtype=torch.bool)
        # The attack differentiates a gradient w.r.t. the input: only the math attention
        # kernel implements that second derivative on CPU.
        with sdpa_kernel(SDPBackend.MATH):
            return self.router(hidden, mask)  # type: ignore[no-any-return]  # (B, K)


def _bce(logits: Tensor, target: Tensor) -> Tensor:
    return nn.functional.binary_cross_entropy_with_logits(logits, target)


def _router(captured: CapturedRouterUpdate) -> nn.Module:
    from sdk.router import Router, RouterConfig

    meta = captured.meta
    router = Router(RouterConfig.model_validate(meta.router), meta.client_ids, meta.encoder_id)
    missing = set(dict(router.named_parameters())) ^ set(captured.before)
    if missing:
        raise AttackInputError(f"captured parameters do not fit the router: {sorted(missing)}")
    router.load_state_dict(captured.before, strict=False)
    return router


def _label_rows(captured: CapturedRouterUpdate, sizes: list[int]) -> Tensor:
    k = len(captured.meta.client_ids)
    rows = [
        nn.functional.one_hot(torch.full((n,), c), k).float()
        for c, n in zip(captured.meta.client_indices, sizes, strict=True)
    ]
    return torch.cat(rows)  # (sum(sizes), K)


def attack_captured_update(
    captured: CapturedRouterUpdate,
    *,
    name: str,
    config: CapturedAttackConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ReconstructionReport]:
    """Run the analytic and the optimization attack on ``captured``; one report each, scored
    against ``truth.embeddings`` beside the baselines from ``truth.pool``."""
    cfg = config or CapturedAttackConfig()
    say = progress or (lambda _m: None)
    meta = captured.meta
    if captured.truth is None or captured.pool is None:
        raise AttackInputError(
            f"{name}: the capture has no truth.embeddings / truth.pool, "
            "so a reconstruction cannot be scored"
        )
    truth, pool = captured.truth.double(), captured.pool.double()
    many = meta.n_samples > 1
    setting = (
        f"{name}: {meta.setting}, {len(meta.client_indices)} client(s) x "
        f"{'/'.join(map(str, meta.samples_per_client))} sample(s), {meta.update}"
    )
    delta = captured.delta()
    for key in ("input_proj.weight", "input_proj.bias"):
        if key not in delta:
            raise AttackInputError(f"{name}: the capture has no {key}")
    x = analytic_linear_inversion(delta["input_proj.weight"], delta["input_proj.bias"])
    reports = [
        reconstruction_report(
            truth, x[None].double(), pool, attack="analytic", setting=setting, best_match=many
        )
    ]
    say(f"{name}: analytic: {reports[-1].verdict}")

    sizes = (
        list(meta.samples_per_client)
        if meta.n_samples <= cfg.max_dummies
        else [1] * len(meta.client_indices)
    )
    model = _TokenRouter(_router(captured))
    # A descent step moves the parameters along minus the gradient: match the gradient to
    # -delta (exact for a FedSGD capture, a direction for trained parameters).
    target = CapturedUpdate({f"router.{n}": -t for n, t in delta.items()}, UpdateKind.GRADIENT)
    inv = InversionConfig(
        checkpoints=(cfg.steps,), lr=cfg.lr, input_kind="embedding", seed=cfg.seed
    )
    result = invert_update(
        model,
        target,
        input_shape=(sum(sizes), meta.tokens, truth.shape[1]),
        labels=_label_rows(captured, sizes),
        loss_fn=_bce,
        config=inv,
        client_sizes=sizes,
        progress=lambda step, loss: say(
            f"{name}: inverting gradients, step {step}, match loss {loss:.4f}"
        ),
    )
    rec = result.final.reconstruction.mean(dim=1).double()  # (m, T, D) -> (m, D)
    reports.append(
        reconstruction_report(
            truth,
            rec,
            pool,
            attack="inverting-gradients",
            setting=setting,
            best_match=many,
            step=cfg.steps,
        )
    )
    say(f"{name}: inverting gradients: {reports[-1].verdict}")
    return reports
