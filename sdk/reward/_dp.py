"""Record-level DP-SGD where one record is one preference pair.

Opacus clips per *row* of a batch, but a Bradley-Terry record spans two rows (chosen and
rejected), and VLM vision towers flatten images into patch rows. So per-pair gradients are
computed one pair at a time (exact, no per-layer support needed), clipped to C, summed and
noised here; Poisson sampling, the noise multiplier and the RDP accounting come from opacus.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import torch
from opacus.accountants import RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from sdk.reward._config import DPSettings

__all__ = ["PairDPSGD"]


class PairDPSGD:
    """Per-pair clipping, Gaussian noise and RDP accounting for a fixed number of steps."""

    def __init__(
        self, params: Iterable[torch.nn.Parameter], settings: DPSettings, *, n_records: int,
        batch_size: int, steps: int,
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.settings = settings
        self.n_records = n_records
        self.sample_rate = min(1.0, batch_size / n_records)
        self.expected_batch = self.sample_rate * n_records
        self.noise_multiplier = float(
            get_noise_multiplier(
                target_epsilon=settings.target_epsilon, target_delta=settings.delta,
                sample_rate=self.sample_rate, steps=steps, accountant="rdp",
            )
        )
        self.accountant = RDPAccountant()

    def sample(self, rng: random.Random) -> list[int]:
        """Poisson sampling: each record joins the batch with probability q (the accounting's)."""
        return [i for i in range(self.n_records) if rng.random() < self.sample_rate]

    def private_gradients(
        self, record_losses: Iterable[Callable[[], torch.Tensor]], generator: torch.Generator
    ) -> float:
        """Set ``p.grad`` to the noised mean of clipped per-record gradients; return mean loss.

        ``generator`` is a CPU generator whatever the parameters' device."""
        clip = self.settings.max_grad_norm
        summed = [torch.zeros_like(p) for p in self.params]
        losses = []
        for loss_fn in record_losses:
            loss = loss_fn()
            raw = torch.autograd.grad(loss, self.params, allow_unused=True)
            grads = [torch.zeros_like(p) if g is None else g.detach()
                     for p, g in zip(self.params, raw, strict=True)]
            norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
            scale = min(1.0, clip / (float(norm) + 1e-12))
            for acc, g in zip(summed, grads, strict=True):
                acc.add_(g, alpha=scale)
            losses.append(float(loss.detach()))
        std = self.noise_multiplier * clip
        for p, acc in zip(self.params, summed, strict=True):
            # Drawn from the CPU generator (so a seed gives the same noise on every device),
            # then moved to the gradient's device and dtype.
            noise = torch.normal(0.0, std, size=acc.shape, generator=generator)
            p.grad = (acc + noise.to(device=acc.device, dtype=acc.dtype)) / self.expected_batch
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
        return sum(losses) / max(1, len(losses))

    def spent_epsilon(self) -> float:
        """Epsilon spent so far at the configured delta."""
        if not self.accountant.history:
            return 0.0
        return float(self.accountant.get_epsilon(delta=self.settings.delta))
