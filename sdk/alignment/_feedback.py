"""Online router updates: the GRPO loss change becomes Neural-Thompson bandit feedback.

The paper writes J for a quantity it minimizes: ``r_t = 1`` when the GRPO loss did not increase
since the previous log, else 0 (DESIGN.md). Under accelerate every rank routes its own share of
the batch; at each log the (context, arm) pairs of all ranks are gathered, rank 0 alone updates
the router with its own r_t, and its state is broadcast so every rank holds identical routers.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from sdk.alignment._chooser import loss_feedback
from sdk.alignment._selection import ArmChooser, RewardSelection

__all__ = ["RouterFeedbackCallback", "sync_router_update"]


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def sync_router_update(
    chooser: ArmChooser, contexts: Tensor | None, arms: list[int], feedback: float | None
) -> int:
    """Apply one bandit update identically on every rank; return the number of pairs used.

    Single process: update in place. Distributed: all-gather the pairs (rank order), update on
    rank 0 with rank 0's ``feedback``, broadcast rank 0's router state to all ranks.
    """
    if not _distributed():
        if feedback is None or contexts is None or not arms:
            return 0
        chooser.update(contexts, arms, [feedback] * len(arms))
        return len(arms)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (contexts, arms))
    used = 0
    if dist.get_rank() == 0 and feedback is not None:
        ctx = [c for c, a in gathered if c is not None and a]
        all_arms = [arm for c, a in gathered if c is not None for arm in a]
        if ctx:
            chooser.update(torch.cat(ctx), all_arms, [feedback] * len(all_arms))
            used = len(all_arms)
    payload: list[Any] = [chooser.state_dict() if dist.get_rank() == 0 else None, used]
    dist.broadcast_object_list(payload, src=0)
    if dist.get_rank() != 0:
        chooser.load_state_dict(payload[0])
    return int(payload[1])


class RouterFeedbackCallback(TrainerCallback):
    """On each log carrying ``loss``, send the bandit feedback for the pairs routed since.

    Pairs routed before the first logged loss have no delta and are dropped. ``history`` holds
    ``(step, loss, r_t, pairs)`` per update, for plots and tests.
    """

    def __init__(self, selection: RewardSelection) -> None:
        self.selection = selection
        self.previous_loss: float | None = None
        self.history: list[tuple[int, float, float | None, int]] = []

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        """Turn the loss change into feedback and update the router on every rank."""
        chooser = self.selection.chooser
        if chooser is None or not logs or "loss" not in logs:
            return
        loss = float(logs["loss"])
        feedback = loss_feedback(self.previous_loss, loss)
        contexts, arms = self.selection.take_pending()
        used = sync_router_update(chooser, contexts, arms, feedback)
        self.previous_loss = loss
        self.history.append((state.global_step, loss, feedback, used))
