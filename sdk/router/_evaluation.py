"""The paper's Table 4: pairwise preference accuracy of reward-selection methods.

Every eval pair is scored once by every client reward model (raw and normalized), and the router
routes its chosen and its rejected response *separately* (as at GRPO time, where each response is
one query). Each selection method is then a small class turning those arrays into an accuracy,
so adding a method costs no extra reward-model forward pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor

from sdk.router._encoder import EncodedBatch, Encoder, concat_batches
from sdk.router._errors import RouterMismatchError, RouterShapeError
from sdk.router._model import Router
from sdk.router._policy import route

if TYPE_CHECKING:  # sdk.reward loads transformers: a server that only routes must not
    from sdk.reward import PairLike  # the one definition of a preference pair's shape

__all__ = [
    "AverageRM",
    "PairScores",
    "RandomRM",
    "RewardScores",
    "RouterSelection",
    "SelectionMethod",
    "SingleRM",
    "Table4",
    "encode_pairs",
    "reward_scores",
    "route_pairs",
    "table4",
]


class _RewardModel(Protocol):
    def score(
        self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str]
    ) -> Tensor: ...


class _Normalizer(Protocol):
    def normalize(self, raw: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class PairScores:
    """Scores of n pairs: ``raw`` and ``norm`` (n, K, 2) over [chosen, rejected]; ``routes``
    (n, 2) the router's client per response; ``owner`` the index of the split's own client or -1."""

    raw: np.ndarray
    norm: np.ndarray
    routes: np.ndarray
    owner: int


def _wins(chosen: np.ndarray, rejected: np.ndarray) -> float:
    # A tie counts half: a method that cannot tell the responses apart scores 0.5, not 0 or 1.
    diff = chosen - rejected  # broadcasts
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


class SelectionMethod(ABC):
    """Chooses which client scores (or how clients' scores combine) for each response."""

    name: str

    @abstractmethod
    def accuracy(self, s: PairScores) -> float:
        """Fraction of pairs whose chosen response gets the higher score."""


class SingleRM(SelectionMethod):
    """Client k's reward model on every response (normalization is monotone: raw suffices)."""

    def __init__(self, index: int, client_id: str) -> None:
        self.index, self.name = index, f"RM {client_id}"

    def accuracy(self, s: PairScores) -> float:
        """Accuracy of one model."""
        return _wins(s.raw[:, self.index, 0], s.raw[:, self.index, 1])


class AverageRM(SelectionMethod):
    """AvgRM: the mean of all clients' normalized scores."""

    name = "AvgRM"

    def accuracy(self, s: PairScores) -> float:
        """Accuracy of the mean normalized score."""
        mean = s.norm.mean(axis=1)  # (n, 2)
        return _wins(mean[:, 0], mean[:, 1])


class RandomRM(SelectionMethod):
    """Each response scored by a uniformly random client: the exact expectation over all K^2
    (chosen client, rejected client) draws, so no sampling noise."""

    name = "Random"

    def accuracy(self, s: PairScores) -> float:
        """Expected accuracy of uniform random routing."""
        c = s.norm[:, :, 0][:, :, None]  # (n, K, 1)
        r = s.norm[:, :, 1][:, None, :]  # (n, 1, K)
        return _wins(c, r)  # mean over (n, K, K)


class RouterSelection(SelectionMethod):
    """Router + the selected client's reward model; ``normalized=False`` is the ablation."""

    def __init__(self, *, normalized: bool = True) -> None:
        self.normalized = normalized
        self.name = "Router+RM" if normalized else "Router+RM (no norm)"

    def accuracy(self, s: PairScores) -> float:
        """Accuracy when each response is scored by the client the router picked for it."""
        scores = s.norm if self.normalized else s.raw
        rows = np.arange(scores.shape[0])
        return _wins(scores[rows, s.routes[:, 0], 0], scores[rows, s.routes[:, 1], 1])


@torch.no_grad()
def encode_pairs(
    encoder: Encoder, pairs: Sequence[PairLike], *, batch_size: int = 64
) -> EncodedBatch:
    """Encode the chosen and the rejected response of every pair: 2 rows per pair."""
    if not pairs:
        raise RouterShapeError("encode_pairs needs at least one pair")
    out = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        images = [p.image for p in chunk] * 2
        prompts = [p.prompt for p in chunk] * 2
        out.append(
            encoder.encode(images, prompts, [p.chosen for p in chunk] + [p.rejected for p in chunk])
        )
    return concat_batches(out)


@dataclass(frozen=True)
class RewardScores:
    """Every client model's scores on n pairs, ``raw`` and ``norm`` (n, K, 2) over
    [chosen, rejected], K in the router's ``client_ids`` order. Router-independent: compute once,
    evaluate many routers."""

    client_ids: list[str]
    raw: np.ndarray
    norm: np.ndarray


@torch.no_grad()
def reward_scores(
    pairs: Sequence[PairLike],
    client_ids: Sequence[str],
    models: Mapping[str, _RewardModel],
    normalizers: Mapping[str, _Normalizer],
) -> RewardScores:
    """Score both responses of every pair with every client's model, raw and normalized."""
    ids = list(client_ids)
    if set(models) != set(ids) or set(normalizers) != set(ids):
        raise RouterMismatchError(
            f"reward models {sorted(models)} / normalizers {sorted(normalizers)} do not match the "
            f"clients {ids}"
        )
    n = len(pairs)
    raw, norm = np.zeros((n, len(ids), 2)), np.zeros((n, len(ids), 2))
    images = [p.image for p in pairs]
    prompts = [p.prompt for p in pairs]
    for side, responses in enumerate(([p.chosen for p in pairs], [p.rejected for p in pairs])):
        for k, cid in enumerate(ids):
            r = models[cid].score(images, prompts, responses).detach().float()  # (n,)
            raw[:, k, side] = r.numpy()
            norm[:, k, side] = normalizers[cid].normalize(r).float().numpy()
    return RewardScores(client_ids=ids, raw=raw, norm=norm)


@torch.no_grad()
def route_pairs(
    pairs: Sequence[PairLike], router: Router, encoder: Encoder, *, batch_size: int = 64
) -> np.ndarray:
    """The router's client index for the chosen and the rejected response of each pair (n, 2)."""
    router.eval()
    routes = np.zeros((len(pairs), 2), dtype=np.int64)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        images, prompts = [p.image for p in chunk], [p.prompt for p in chunk]
        for side, responses in enumerate(([p.chosen for p in chunk], [p.rejected for p in chunk])):
            batch = encoder.encode(images, prompts, responses)
            routes[start : start + len(chunk), side] = route(
                router(batch.hidden, batch.mask)
            ).numpy()
    return routes


@dataclass(frozen=True)
class Table4:
    """Accuracy per method (rows) and split (columns), with the averages and routing accuracy."""

    id_splits: list[str]
    heldout_splits: list[str]
    accuracy: dict[str, dict[str, float]]  # method -> split -> accuracy
    routing_accuracy: float
    single_methods: list[str]

    def average(self, method: str, splits: Sequence[str]) -> float:
        """Macro average of ``method`` over ``splits`` (nan when there are none)."""
        return (
            float(np.mean([self.accuracy[method][s] for s in splits])) if splits else float("nan")
        )

    def id_avg(self, method: str) -> float:
        """In-distribution average (over the clients' eval splits)."""
        return self.average(method, self.id_splits)

    def heldout_avg(self, method: str) -> float:
        """Held-out average (over the held-out categories)."""
        return self.average(method, self.heldout_splits)

    def best_single_id_avg(self) -> float:
        """The best single client reward model on the in-distribution average."""
        return max(self.id_avg(m) for m in self.single_methods)

    def best_single_id_method(self) -> str:
        """Name of the single client reward model with the best in-distribution average."""
        return max(self.single_methods, key=self.id_avg)

    def best_single_heldout_avg(self) -> float:
        """The best single client reward model on the held-out average (chosen on held-out)."""
        return max(self.heldout_avg(m) for m in self.single_methods)

    def format(self) -> str:
        """A plain-text table: one row per method, one column per split plus the averages."""
        cols = [*self.id_splits, "ID avg", *self.heldout_splits, "HO avg"]
        head = f"{'method':<22}" + "".join(f"{c[:9]:>10}" for c in cols)
        lines = [head, "-" * len(head)]
        for m, accs in self.accuracy.items():
            vals = [accs[s] for s in self.id_splits] + [self.id_avg(m)]
            vals += [accs[s] for s in self.heldout_splits] + [self.heldout_avg(m)]
            lines.append(f"{m:<22}" + "".join(f"{v:>10.3f}" for v in vals))
        lines.append(
            f"routing accuracy (ID responses routed to their own client): {self.routing_accuracy:.3f}"
        )
        return "\n".join(lines)


def table4(
    router: Router,
    encoder: Encoder,
    id_splits: Mapping[str, Sequence[PairLike]],
    heldout_splits: Mapping[str, Sequence[PairLike]],
    scores: Mapping[str, RewardScores],
    *,
    methods: Sequence[SelectionMethod] | None = None,
) -> Table4:
    """Evaluate every selection method on every split; ``id_splits`` are keyed by client id and
    ``scores`` (from :func:`reward_scores`) by split name."""
    router.check_compatible(router.client_ids, encoder.encoder_id)
    stray = set(id_splits) - set(router.client_ids)
    if stray:
        raise RouterMismatchError(f"in-distribution splits {sorted(stray)} name no router client")
    singles = [SingleRM(k, c) for k, c in enumerate(router.client_ids)]
    chosen = (
        list(methods)
        if methods is not None
        else [
            *singles,
            AverageRM(),
            RandomRM(),
            RouterSelection(),
            RouterSelection(normalized=False),
        ]
    )
    acc: dict[str, dict[str, float]] = {m.name: {} for m in chosen}
    hits = total = 0
    for name, pairs in [*id_splits.items(), *heldout_splits.items()]:
        rs = scores[name]
        if rs.client_ids != router.client_ids:
            raise RouterMismatchError(
                f"scores of {name!r} are for clients {rs.client_ids}, not {router.client_ids}"
            )
        owner = router.client_ids.index(name) if name in id_splits else -1
        s = PairScores(
            raw=rs.raw, norm=rs.norm, routes=route_pairs(pairs, router, encoder), owner=owner
        )
        for m in chosen:
            acc[m.name][name] = m.accuracy(s)
        if owner >= 0:
            hits += int((s.routes == owner).sum())
            total += s.routes.size
    return Table4(
        id_splits=list(id_splits),
        heldout_splits=list(heldout_splits),
        accuracy=acc,
        routing_accuracy=hits / total if total else float("nan"),
        single_methods=[m.name for m in chosen if isinstance(m, SingleRM)],
    )
