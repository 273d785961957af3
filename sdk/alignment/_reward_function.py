"""The reward function trl's GRPOTrainer calls: MoR (or any strategy) as an async callable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PIL import Image

from sdk.alignment._errors import RewardShapeError
from sdk.alignment._parsing import parse_choice
from sdk.alignment._reward_source import RewardSource
from sdk.alignment._selection import CompletionBatch, RewardSelection
from sdk.wire import ImageRef

__all__ = ["SelectionRewardFunction", "completion_batch", "message_text"]


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


def completion_batch(prompts: Sequence[Any], completions: Sequence[Any],
                     columns: dict[str, Any]) -> CompletionBatch:
    """The batch of a reward call: one image per completion from trl's ``image`` or
    ``images`` dataset column (PIL images or :class:`~sdk.wire.ImageRef`), the prompts' and
    completions' text; :class:`CompletionBatch` checks the lengths."""
    images: list[Image.Image | ImageRef | None]
    if "image" in columns:
        images = list(columns["image"])
    elif "images" in columns:
        images = [imgs[0] if imgs else None for imgs in columns["images"]]
    else:
        images = [None] * len(completions)
    return CompletionBatch(images=images, prompts=[message_text(p) for p in prompts],
                           responses=[message_text(c) for c in completions])


class SelectionRewardFunction:
    """``await f(prompts=, completions=, completion_ids=, **columns) -> list[float]``.

    Wraps a :class:`RewardSelection` (MoR or a baseline) and a :class:`RewardSource`. trl calls
    it once per generation batch on each rank; ``history`` keeps the mean reward per call.

    ``invalid_choice_reward``: when set, a completion of a multiple-choice prompt (a non-empty
    ``options`` column, see :func:`~sdk.alignment.query_dataset`) that does not parse strictly
    to one option gets this reward and is sent to no client: open-generation rewards in the same
    run would otherwise pull the multiple-choice answers out of format (docs/alignment.md,
    "Format rule"). Use about what a multiple-choice client gives an unparseable answer; the
    clip floor ``-c`` makes format outweigh right versus wrong.
    """

    def __init__(self, selection: RewardSelection, source: RewardSource, *,
                 invalid_choice_reward: float | None = None) -> None:
        self.selection = selection
        self.source = source
        self.invalid_choice_reward = invalid_choice_reward
        self.invalid_choices = 0  # completions the format rule scored
        self.history: list[float] = []
        self.__name__ = f"reward_{selection.name}"  # trl logs reward columns under this name

    @property
    def method(self) -> str:
        """The selection's registered name."""
        return self.selection.name

    def trainer_callbacks(self) -> list[Any]:
        """The in-process router feedback, for online strategies (MoR)."""
        from sdk.alignment._feedback import RouterFeedbackCallback

        return [RouterFeedbackCallback(self.selection)] if self.selection.chooser else []

    async def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float]:
        """One reward per completion (trl's call: the batch read from its columns)."""
        return await self.score(completion_batch(prompts, completions, columns),
                                columns.get("options"))

    async def score(self, batch: CompletionBatch,
                    options: Sequence[Sequence[str]] | None = None) -> list[float]:
        """One reward per completion of ``batch``; ``options[i]``: completion i's prompt's
        options (empty for an open prompt), read by the format rule. The typed call of a
        caller that holds its batch already (the server's reward service)."""
        n = len(batch)
        invalid = self._invalid_choices(batch.responses, options, n)
        keep = [i for i in range(n) if i not in invalid]
        rewards = [self.invalid_choice_reward or 0.0] * n
        if keep:
            scored = await self.selection.rewards(batch.subset(keep), self.source)
            for i, r in zip(keep, scored, strict=True):
                rewards[i] = r
        if rewards:
            self.history.append(sum(rewards) / len(rewards))
        return rewards

    def _invalid_choices(self, responses: Sequence[str], options: Sequence[Any] | None,
                         n: int) -> set[int]:
        """Indices of multiple-choice completions that name no option (when the rule is on)."""
        if self.invalid_choice_reward is None or options is None:
            return set()
        if len(options) != n:
            raise RewardShapeError(f"{len(options)} option lists for {n} completions")
        bad = {i for i, (r, o) in enumerate(zip(responses, options, strict=True))
               if o and parse_choice(r, o) is None}
        self.invalid_choices += len(bad)
        return bad
