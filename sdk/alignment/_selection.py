"""Reward-selection strategies: MoR, its ablation and the paper's baselines, behind one interface.

Each strategy turns a batch of completions into one reward per completion by asking a
:class:`RewardSource`. Strategies register by name (no if/elif dispatch); ``make_selection``
builds one from its name and keyword arguments.
"""

from __future__ import annotations

import asyncio
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import torch
from PIL import Image
from torch import Tensor

from sdk.alignment._errors import RewardShapeError, UnknownSelectionError
from sdk.alignment._reward_source import RewardSource, check_lengths
from sdk.wire import ImageRef

__all__ = [
    "SELECTIONS",
    "ArmChooser",
    "AvgRM",
    "BestSingle",
    "CompletionBatch",
    "FedAvgRM",
    "MoRNoOnline",
    "MoRSelection",
    "PendingFeedback",
    "PluralLLMAlpha",
    "RandomSelection",
    "RewardSelection",
    "Routing",
    "make_selection",
    "register_selection",
    "routed_scores",
]


@dataclass(frozen=True)
class CompletionBatch:
    """B completions to reward: ``images[i]`` (a PIL image or an :class:`~sdk.wire.ImageRef`,
    passed on as it is), ``prompts[i]`` (text), ``responses[i]``. Its lengths are checked here,
    once: the selections and sources below take them as given."""

    images: list[Image.Image | ImageRef | None]
    prompts: list[str]
    responses: list[str]

    def __post_init__(self) -> None:
        check_lengths(self.images, self.prompts, self.responses)

    def __len__(self) -> int:
        return len(self.prompts)

    def subset(self, indices: Sequence[int]) -> CompletionBatch:
        """The completions at ``indices``, in that order."""
        return CompletionBatch(
            images=[self.images[i] for i in indices],
            prompts=[self.prompts[i] for i in indices],
            responses=[self.responses[i] for i in indices],
        )


@dataclass(frozen=True)
class Routing:
    """A routing decision: ``arms`` (B,) client indices and the router ``contexts`` (B, ...)."""

    arms: list[int]
    contexts: Tensor


@runtime_checkable
class ArmChooser(Protocol):
    """The router as the alignment stage sees it (an adapter over the federated router)."""

    @property
    def num_arms(self) -> int:
        """Number of clients K."""
        ...

    def choose(
        self,
        images: Sequence[Image.Image | ImageRef | None],
        prompts: Sequence[str],
        responses: Sequence[str],
        *,
        explore: bool,
    ) -> Routing:
        """Pick one client per triple: Thompson sampling when ``explore``, else the argmax."""
        ...

    def update(self, contexts: Tensor, arms: Sequence[int], rewards: Sequence[float]) -> None:
        """Bandit update of the head with one feedback value per (context, arm)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything that must agree across ranks."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


@dataclass
class PendingFeedback:
    """(context, arm) pairs routed since the last bandit feedback; contexts (N, ...)."""

    contexts: list[Tensor] = field(default_factory=list)
    arms: list[int] = field(default_factory=list)

    def add(self, routing: Routing) -> None:
        """Append one batch's routing."""
        self.contexts.append(routing.contexts.detach().cpu())
        self.arms.extend(routing.arms)

    def take(self) -> tuple[Tensor | None, list[int]]:
        """Return and clear the pairs (contexts concatenated along the batch axis)."""
        contexts = torch.cat(self.contexts) if self.contexts else None
        arms = self.arms
        self.contexts, self.arms = [], []
        return contexts, arms


class RewardSelection(ABC):
    """Turns a batch of completions into one reward per completion."""

    name: ClassVar[str]

    @abstractmethod
    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """One reward per completion of ``batch``."""

    @property
    def chooser(self) -> ArmChooser | None:
        """The online router, for strategies that learn from bandit feedback (else None)."""
        return None

    def take_pending(self) -> tuple[Tensor | None, list[int]]:
        """(context, arm) pairs awaiting bandit feedback; none for non-routing strategies."""
        return None, []


SELECTIONS: dict[str, type[RewardSelection]] = {}
"""Reward-selection strategies by name; ``register_selection`` adds one."""
_S = TypeVar("_S", bound=type[RewardSelection])


def register_selection(name: str) -> Callable[[_S], _S]:
    """Class decorator: add a strategy to :data:`SELECTIONS` under ``name``."""

    def decorate(cls: _S) -> _S:
        if name in SELECTIONS:
            raise ValueError(f"reward selection {name!r} is already registered")
        cls.name = name
        SELECTIONS[name] = cls
        return cls

    return decorate


def make_selection(name: str, **kwargs: Any) -> RewardSelection:
    """Build the strategy registered as ``name``."""
    try:
        cls = SELECTIONS[name]
    except KeyError:
        raise UnknownSelectionError(
            f"unknown reward selection {name!r}; registered: {sorted(SELECTIONS)}"
        ) from None
    return cls(**kwargs)


async def routed_scores(
    batch: CompletionBatch, arms: Sequence[int], source: RewardSource
) -> list[float]:
    """One score per completion from client ``arms[i]``: completions are grouped by client and
    the clients queried concurrently (the building block of routed strategies)."""
    if len(arms) != len(batch):
        raise RewardShapeError(f"{len(arms)} arms for {len(batch)} completions")
    groups: dict[int, list[int]] = {}
    for i, arm in enumerate(arms):
        groups.setdefault(int(arm), []).append(i)
    clients = sorted(groups)
    subsets = [batch.subset(groups[k]) for k in clients]
    answers = await asyncio.gather(
        *(source.score(k, sub.images, sub.prompts, sub.responses)
          for k, sub in zip(clients, subsets, strict=True))
    )
    out = [math.nan] * len(batch)
    for k, scores in zip(clients, answers, strict=True):
        for i, s in zip(groups[k], scores, strict=True):
            out[i] = s
    return out


async def _all_scores(batch: CompletionBatch, source: RewardSource) -> Tensor:
    """Every client's score of every completion: (K, B)."""
    answers = await asyncio.gather(
        *(
            source.score(k, batch.images, batch.prompts, batch.responses)
            for k in range(source.num_clients)
        )
    )
    return torch.tensor(answers, dtype=torch.float64).reshape(source.num_clients, len(batch))


@register_selection("mor")
class MoRSelection(RewardSelection):
    """MoR: the router picks one client per completion (Thompson sampling when ``online``).

    Routed (context, arm) pairs are kept for the bandit feedback that
    :class:`~sdk.alignment.RouterFeedbackCallback` delivers.
    """

    def __init__(self, chooser: ArmChooser, *, online: bool = True) -> None:
        self._chooser = chooser
        self.online = online
        self._pending = PendingFeedback()
        self.arm_counts = [0] * chooser.num_arms

    @property
    def chooser(self) -> ArmChooser | None:
        """The router adapter (None when routing is frozen)."""
        return self._chooser if self.online else None

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Route, query the chosen clients concurrently, one score per completion."""
        if len(batch) == 0:
            return []
        routing = self._chooser.choose(
            batch.images, batch.prompts, batch.responses, explore=self.online
        )
        for arm in routing.arms:
            self.arm_counts[arm] += 1
        if self.online:
            self._pending.add(routing)
        return await routed_scores(batch, routing.arms, source)

    def take_pending(self) -> tuple[Tensor | None, list[int]]:
        """Routed pairs since the last feedback."""
        return self._pending.take()


@register_selection("mor_no_online")
class MoRNoOnline(MoRSelection):
    """Ablation: MoR with the router frozen after federated training (argmax, no updates)."""

    def __init__(self, chooser: ArmChooser) -> None:
        super().__init__(chooser, online=False)


@register_selection("best_single")
class BestSingle(RewardSelection):
    """Every completion is scored by client ``client``."""

    def __init__(self, client: int = 0) -> None:
        self.client = client

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Client ``client``'s scores."""
        return await source.score(self.client, batch.images, batch.prompts, batch.responses)


@register_selection("random")
class RandomSelection(RewardSelection):
    """Each completion goes to a uniformly random client."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Random routing, then the same grouped query as MoR."""
        arms = [self._rng.randrange(source.num_clients) for _ in range(len(batch))]
        return await routed_scores(batch, arms, source)


@register_selection("avg_rm")
class AvgRM(RewardSelection):
    """Every client scores every completion; the reward is the plain mean."""

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Mean over clients."""
        if len(batch) == 0:
            return []
        return [float(x) for x in (await _all_scores(batch, source)).mean(dim=0)]


@register_selection("plurallm_alpha")
class PluralLLMAlpha(RewardSelection):
    """Group rewards combined with adaptive weights favouring under-aligned groups.

    After Srewa et al. (2025). Each client k is a group with a running mean reward ``m_k``
    (exponential moving average, rate ``eta``, of the batch mean of its scores; starts at 0).
    The reward of completion i is ``sum_k w_k r_k(i)`` with ``w = softmax(-alpha * m)``, computed
    *before* this batch updates ``m``: the group the policy currently pleases least weighs most.
    ``alpha = 0`` is AvgRM.
    """

    def __init__(self, alpha: float = 1.0, eta: float = 0.1) -> None:
        if not 0.0 < eta <= 1.0:
            raise ValueError(f"eta must be in (0, 1], got {eta}")
        self.alpha = alpha
        self.eta = eta
        self.running_mean: Tensor | None = None  # (K,)

    def weights(self, num_clients: int) -> Tensor:
        """Current group weights (K,), summing to 1."""
        m = self.running_mean if self.running_mean is not None else torch.zeros(num_clients)
        return torch.softmax(-self.alpha * m.double(), dim=0)

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Weighted group rewards, then the running-mean update."""
        if len(batch) == 0:
            return []
        scores = await _all_scores(batch, source)  # (K, B)
        w = self.weights(source.num_clients)  # (K,)
        combined = (w[:, None] * scores).sum(dim=0)
        batch_mean = scores.mean(dim=1)
        prev = self.running_mean if self.running_mean is not None else torch.zeros_like(batch_mean)
        self.running_mean = (1 - self.eta) * prev.double() + self.eta * batch_mean
        return [float(x) for x in combined]


@register_selection("fedavg_rm")
class FedAvgRM(RewardSelection):
    """One reward model whose parameters were averaged across clients scores everything.

    ``averaged`` is a one-client source over that model (see
    :func:`~sdk.alignment.fedavg_state_dicts`); the clients' own source is not consulted.
    """

    def __init__(self, averaged: RewardSource) -> None:
        self.averaged = averaged

    async def rewards(self, batch: CompletionBatch, source: RewardSource) -> list[float]:
        """Scores of the averaged model."""
        return await self.averaged.score(0, batch.images, batch.prompts, batch.responses)
