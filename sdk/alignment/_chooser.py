"""Adapter from the federated router (encoder + Neural TS head) to :class:`ArmChooser`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from torch import Tensor

from sdk.alignment._selection import Routing
from sdk.router import Encoder, NeuralThompsonRouter, NeuralTSConfig, route
from sdk.wire import ImageRef

__all__ = ["ONLINE_ROUTER_CONFIG", "NeuralTSChooser", "loss_feedback"]

ONLINE_ROUTER_CONFIG = NeuralTSConfig(nu=0.01, lr=0.01)
"""Neural TS settings for the router during GRPO (pass ``seed`` with ``model_copy``).

sdk.router's defaults (nu 0.1, lr 0.1) suit an informative bandit. Here the feedback (did the
GRPO loss not rise?) is nearly a coin flip: with them, Thompson draws send many completions to
a wrong client and the updates swing routing from all right to all wrong.
"""


class NeuralTSChooser:
    """Encode (x, y), take the frozen trunk's context z (B, d), pick arms with Neural TS.

    ``explore=False`` routes by the argmax of the router logits (the MoR-without-online ablation
    and evaluation); ``explore=True`` draws Thompson samples.
    """

    def __init__(self, encoder: Encoder, bandit: NeuralThompsonRouter) -> None:
        self.encoder = encoder
        self.bandit = bandit
        self.allowed: Tensor | None = None  # (K,) bool: the arms it may pick (None: all)

    def allow(self, arms: Sequence[int]) -> None:
        """Pick only among ``arms`` from now on (a head whose member left, or that no round
        trained yet, keeps its place in the router and is never picked)."""
        if not arms:
            raise ValueError("at least one arm must stay selectable")
        mask = torch.zeros(self.num_arms, dtype=torch.bool)
        mask[list(arms)] = True
        self.allowed = None if bool(mask.all()) else mask

    @property
    def num_arms(self) -> int:
        """Number of clients K."""
        return int(self.bandit.router.num_clients)

    def choose(
        self,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
        *,
        explore: bool,
    ) -> Routing:
        """Arms (B,) and contexts z (B, d); the encoder decodes a reference only when its
        features are not cached."""
        encoded = self.encoder.encode(images, prompts, responses)
        z = self.bandit.context(encoded.hidden, encoded.mask)  # (B, d)
        if explore:
            arms = self.bandit.select(z, self.allowed)
        else:
            with torch.no_grad():
                arms = route(self.bandit.router.head(z), self.allowed)
        return Routing(arms=[int(a) for a in arms], contexts=z)

    def update(self, contexts: Tensor, arms: Sequence[int], rewards: Sequence[float]) -> None:
        """One Neural TS update of the head."""
        self.bandit.update(contexts, torch.tensor(list(arms)), torch.tensor(list(rewards)))

    def state_dict(self) -> dict[str, Any]:
        """The bandit's online state."""
        return dict(self.bandit.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the bandit's online state."""
        self.bandit.load_state_dict(state)


def loss_feedback(previous_loss: float | None, loss: float) -> float | None:
    """``1.0`` if ``loss <= previous_loss``, ``0.0`` if it rose, ``None`` with no previous loss."""
    if previous_loss is None:
        return None
    return 1.0 if loss <= previous_loss else 0.0
