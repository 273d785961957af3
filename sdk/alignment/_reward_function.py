"""The reward function trl's GRPOTrainer calls: MoR (or any strategy) as an async callable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PIL import Image

from sdk.alignment._errors import RewardShapeError
from sdk.alignment._reward_source import RewardSource
from sdk.alignment._selection import CompletionBatch, RewardSelection

__all__ = ["SelectionRewardFunction", "message_text"]


def message_text(item: Any) -> str:
    """Plain text of a prompt or completion, standard (str) or conversational (messages)."""
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        content = item.get("content", "")
        if isinstance(content, str):
            return content
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    if isinstance(item, Sequence):
        # A conversation: the user's turns for a prompt, the assistant's for a completion.
        return "\n".join(message_text(m) for m in item)
    raise TypeError(f"cannot read text from a {type(item).__name__}")


def _images(columns: dict[str, Any], n: int) -> list[Image.Image | None]:
    """One image per completion from trl's ``image`` or ``images`` dataset column."""
    if "image" in columns:
        images: list[Image.Image | None] = list(columns["image"])
    elif "images" in columns:
        images = [imgs[0] if imgs else None for imgs in columns["images"]]
    else:
        images = [None] * n
    if len(images) != n:
        raise RewardShapeError(f"{len(images)} images for {n} completions")
    return images


class SelectionRewardFunction:
    """``await f(prompts=, completions=, completion_ids=, **columns) -> list[float]``.

    Wraps a :class:`RewardSelection` (MoR or a baseline) and a :class:`RewardSource`. trl calls
    it once per generation batch on each rank; ``history`` keeps the mean reward per call.
    """

    def __init__(self, selection: RewardSelection, source: RewardSource) -> None:
        self.selection = selection
        self.source = source
        self.history: list[float] = []
        self.__name__ = f"reward_{selection.name}"  # trl logs reward columns under this name

    async def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float]:
        """One reward per completion."""
        n = len(completions)
        if len(prompts) != n:
            raise RewardShapeError(f"{len(prompts)} prompts for {n} completions")
        batch = CompletionBatch(
            images=_images(columns, n),
            prompts=[message_text(p) for p in prompts],
            responses=[message_text(c) for c in completions],
        )
        rewards = await self.selection.rewards(batch, self.source)
        if len(rewards) != n:
            raise RewardShapeError(
                f"selection {self.selection.name!r} returned {len(rewards)} rewards for {n} completions"
            )
        if rewards:
            self.history.append(sum(rewards) / len(rewards))
        return rewards
