"""Small differentiable settings in which the attacks are proven to bite (tests, benchmark).

fedmor's default encoders are not differentiable with respect to the image (the HashingEncoder
hashes pixels; a VLM's vision tower could be, at a cost). To show what the optimization attack
recovers wherever the encoder IS differentiable, :class:`PatchImageRouter` puts a small ViT-style
patch encoder in front of a real ``sdk.router.Router``; the update covers the router only, as in
fedmor. :func:`smooth_images` draws the images it is tested on.

:func:`secure_mean` gives what a server learns from a secure-aggregation round of such updates
(the consortium's ``router_secagg`` round kind, run in memory).

For membership inference, :func:`overfit_reward_model_scores` returns the raw scores of n members
then n non-members of a deliberately over-fitted real ``sdk.reward.RewardModel`` (the small MLP
reward model, plain or DP-trained, lives in attacks._mlp_reward).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attacks._capture import round_mean
from attacks._errors import AttackInputError
from attacks._inversion import CapturedUpdate

__all__ = [
    "PatchImageRouter",
    "overfit_reward_model_scores",
    "secure_mean",
    "smooth_images",
]


def smooth_images(n: int, *, size: int = 16, seed: int = 0) -> Tensor:
    """(n, 3, size, size) images in [0, 1]: a flat background with three soft colour blobs."""
    g = torch.Generator().manual_seed(seed)
    axis = torch.linspace(0, 1, size)
    yy, xx = torch.meshgrid(axis, axis, indexing="ij")
    out = torch.empty(n, 3, size, size)
    for i in range(n):
        img = (0.5 * torch.rand(3, 1, 1, generator=g)).expand(3, size, size).clone()
        for _ in range(3):
            c = torch.rand(2, generator=g)
            r = 0.1 + 0.25 * torch.rand(1, generator=g)
            colour = torch.rand(3, 1, 1, generator=g)
            blob = torch.exp(-((xx - c[0]) ** 2 + (yy - c[1]) ** 2) / (2 * r**2))
            img = img * (1 - blob) + colour * blob
        out[i] = img.clamp(0, 1)
    return out


class _PatchEncoder(nn.Module):
    """2x2 patch embedding (a conv), a sigmoid-gated depthwise mix and fixed position
    embeddings: (B, 3, 16, 16) -> (B, 64, dim)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            self.patch = nn.Conv2d(3, dim, 2, stride=2)
            self.mix = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
            # Fixed position embeddings, as in a ViT: the Router has none and mean-pools, so
            # without them the update would not tell the patches' places apart.
            self.register_buffer("pos", torch.randn(64, dim))

    def forward(self, images: Tensor) -> Tensor:
        h = self.patch(images)  # (B, dim, 8, 8)
        h = h + torch.sigmoid(self.mix(h))  # (B, dim, 8, 8)
        return h.flatten(2).transpose(1, 2) + self.pos  # type: ignore[operator,no-any-return]


class PatchImageRouter(nn.Module):
    """A frozen differentiable patch encoder in front of ``router`` (an ``sdk.router.Router``
    with ``input_dim`` = the encoder's dim): 16x16 images -> (B, K) routing logits."""

    def __init__(self, router: nn.Module, dim: int) -> None:
        super().__init__()
        self.encoder = _PatchEncoder(dim).requires_grad_(False)
        self.router = router

    def forward(self, images: Tensor) -> Tensor:
        tokens = self.encoder(images)  # (B, 64, dim)
        mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
        # The attack differentiates the update w.r.t. the image (a second derivative): only
        # the math attention kernel implements that on CPU.
        with sdpa_kernel(SDPBackend.MATH):
            return self.router(tokens, mask)  # type: ignore[no-any-return]  # (B, K)


def secure_mean(
    updates: Sequence[CapturedUpdate], sizes: Sequence[int], *, rng: np.random.Generator
) -> CapturedUpdate:
    """What the server learns from a secure-aggregation round of ``updates`` (client k trained
    on ``sizes[k]`` samples): their weighted mean, through a ``router_secagg`` round in memory
    (masked, fixed-point; ``round_mean``), as one update of the same kind, keyed like the
    inputs."""

    if not updates or len(updates) != len(sizes):
        raise AttackInputError("give one size per update, at least one update")
    first = updates[0]
    if any((u.kind, u.local_steps, u.local_lr) != (first.kind, first.local_steps, first.local_lr)
           for u in updates):
        raise AttackInputError("the updates of one round must share kind, steps and lr")
    names = list(first.tensors)
    flat = [torch.cat([u.tensors[n].reshape(-1) for n in names]).numpy() for u in updates]
    mean = torch.from_numpy(round_mean(flat, sizes, kind="router_secagg", rng=rng))  # (P,)
    out, offset = {}, 0
    for n in names:
        t = first.tensors[n]
        out[n] = mean[offset : offset + t.numel()].reshape(t.shape)
        offset += t.numel()
    return CapturedUpdate(out, first.kind, first.local_steps, first.local_lr)


def overfit_reward_model_scores(n: int, *, steps: int = 150) -> tuple[Tensor, Tensor]:
    """The same for a real ``sdk.reward.RewardModel`` (tiny Qwen2.5-VL from config) trained by
    sdk.reward's Bradley-Terry loop on n synthetic ``position`` pairs (32x32 images), the
    category it learns slowest, so it mostly memorizes: full batch, lr 3e-3, no weight decay,
    no gradient clipping."""
    from sdk.data import SynthConfig, load_pairs, synthesize
    from sdk.models import build_tiny_vlm
    from sdk.reward import RewardModel, RewardTrainingConfig, pair_texts, train_reward_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synth = SynthConfig(
            seed=0,
            image_size=32,
            clients=("position",),
            heldout=("color",),
            train_pairs=n,
            eval_pairs=n,
            heldout_pairs=1,
            warmup_queries=0,
            policy_train_queries=0,
            policy_eval_queries=0,
        )
        synthesize(synth, root / "data")
        data = root / "data" / "clients" / "position"
        pairs = load_pairs(data / "train") + load_pairs(data / "eval")
        backbone = build_tiny_vlm("qwen2_5_vl", root / "bb", corpus=pair_texts(pairs[:n]))
        model = RewardModel.from_backbone(backbone)
        cfg = RewardTrainingConfig(
            steps=steps,
            batch_size=n,
            lr=3e-3,
            warmup_steps=10,
            weight_decay=0.0,
            max_grad_norm=None,
            eval_every=0,
            fit_normalizer=False,
        )
        train_reward_model(model, pairs[:n], [], cfg, progress=False)
        images, prompts = [p.image for p in pairs], [p.prompt for p in pairs]
        return (
            model.score(images, prompts, [p.chosen for p in pairs]),
            model.score(images, prompts, [p.rejected for p in pairs]),
        )
