"""Table 4: the selection methods' arithmetic, and an end-to-end run with a federated router."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sdk.router import (
    AverageRM,
    FederatedConfig,
    FederatedRouterTrainer,
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    RandomRM,
    Router,
    RouterClient,
    RouterConfig,
    RouterSelection,
    SingleRM,
    image_digest,
    reward_scores,
    table4,
)
from sdk.router._errors import RouterMismatchError
from sdk.router._evaluation import PairScores
from tests.router._helpers import _chart_item, _color_item


def _scores(raw: np.ndarray, routes: np.ndarray, norm: np.ndarray | None = None) -> PairScores:
    return PairScores(raw=raw, norm=raw if norm is None else norm, routes=routes, owner=0)


def test_random_selection_is_the_exact_expectation_over_all_routings() -> None:
    rng = np.random.default_rng(0)
    norm = rng.normal(size=(7, 3, 2))
    s = _scores(norm, np.zeros((7, 2), dtype=np.int64))
    brute = np.mean(
        [
            RouterSelection().accuracy(_scores(norm, np.full((7, 2), [a, b])))
            for a, b in itertools.product(range(3), repeat=2)
        ]
    )
    assert RandomRM().accuracy(s) == pytest.approx(brute)


def test_single_average_and_ties() -> None:
    raw = np.array([[[2.0, 1.0], [0.0, 5.0]], [[1.0, 1.0], [3.0, 0.0]]])  # (n=2, K=2, 2)
    s = _scores(raw, np.zeros((2, 2), dtype=np.int64))
    assert SingleRM(0, "a").accuracy(s) == 0.75  # a win and a tie
    assert SingleRM(1, "b").accuracy(s) == 0.5
    assert AverageRM().accuracy(s) == 0.5  # means: (1, 3) loses, (2, 0.5) wins


def test_normalization_matters_when_chosen_and_rejected_go_to_different_clients() -> None:
    # Client 0 scores on a scale of hundreds, client 1 around 0; normalized they are comparable.
    raw = np.array([[[100.0, 101.0], [0.5, -0.5]]])  # (n=1, K=2, [chosen, rejected])
    norm = np.array([[[-1.0, 0.2], [1.5, -1.0]]])
    routes = np.array([[1, 0]])  # chosen -> client 1, rejected -> client 0
    s = _scores(raw, routes, norm)
    assert RouterSelection(normalized=False).accuracy(s) == 0.0  # 0.5 < 101
    assert RouterSelection().accuracy(s) == 1.0  # 1.5 > 0.2
    same = _scores(raw, np.array([[0, 0]]), norm)  # one client for both: normalization is moot
    assert RouterSelection(normalized=False).accuracy(same) == RouterSelection().accuracy(same)


@dataclass
class _Pair:
    image: Image.Image
    prompt: str
    chosen: str
    rejected: str


class _ExpertScorer:
    """A reward model that is right on its own category and guesses (hash noise) elsewhere; its
    raw scale is ``offset + scale * score``, so raw scores of two experts are not comparable."""

    def __init__(self, good: set[tuple[str, str]], offset: float, scale: float) -> None:
        self.good, self.offset, self.scale = good, offset, scale

    def score(
        self, images: Sequence[Any], prompts: Sequence[str], responses: Sequence[str]
    ) -> torch.Tensor:
        out = []
        for img, p, r in zip(images, prompts, responses, strict=True):
            if (image_digest(img), r) in self.good:
                v = 1.0
            else:
                h = hashlib.sha256(f"{p}|{r}|{self.offset}".encode()).digest()
                v = h[0] / 255.0 * 1.6 - 0.8  # noise in [-0.8, 0.8]
            out.append(self.offset + self.scale * v)
        return torch.tensor(out)


class _Affine:
    def __init__(self, offset: float, scale: float) -> None:
        self.offset, self.scale = offset, scale

    def normalize(self, raw: torch.Tensor) -> torch.Tensor:
        return (raw - self.offset) / self.scale


def _pairs(kind: str, n: int, seed: int) -> list[_Pair]:
    rng = random.Random(seed)
    make = _color_item if kind == "color" else _chart_item
    return [_Pair(*make(rng)) for _ in range(n)]


def test_table4_end_to_end_with_a_federated_router() -> None:
    enc = HashingEncoder(HashingEncoderConfig(dim=16))
    ids = ("colors", "charts")
    kinds = {"colors": "color", "charts": "chart"}
    train = {c: _pairs(kinds[c], 40, seed=i) for i, c in enumerate(ids)}
    evals = {c: _pairs(kinds[c], 40, seed=50 + i) for i, c in enumerate(ids)}
    clients = [RouterClient.from_pairs(c, train[c], enc, ids) for c in ids]
    cfg = RouterConfig(input_dim=16, d_model=16, num_layers=1, num_heads=2, dim_feedforward=32)
    router = Router(cfg, list(ids), enc.encoder_id)
    local = LocalTrainingConfig(epochs=2, batch_size=16, lr=3e-3)
    FederatedRouterTrainer(router, clients, FederatedConfig(rounds=5, local=local), log=None).run()

    affine = {"colors": (100.0, 50.0), "charts": (0.0, 1.0)}
    models = {
        c: _ExpertScorer({(image_digest(p.image), p.chosen) for p in evals[c]}, *affine[c])
        for c in ids
    }
    normalizers = {c: _Affine(*affine[c]) for c in ids}
    scores = {c: reward_scores(evals[c], ids, models, normalizers) for c in ids}
    t = table4(router, enc, evals, {}, scores)

    assert t.routing_accuracy >= 0.9
    # Each expert is right at home and guesses elsewhere; the router sends each pair home.
    assert t.accuracy["RM colors"]["colors"] == 1.0 and t.accuracy["RM charts"]["charts"] == 1.0
    assert t.best_single_id_avg() < 0.9
    assert t.id_avg(t.best_single_id_method()) == t.best_single_id_avg()
    assert t.id_avg("Router+RM") >= max(0.9, t.best_single_id_avg() + 0.1)
    assert t.id_avg("Router+RM") > t.id_avg("AvgRM")
    assert t.id_avg("Router+RM") > t.id_avg("Random")
    assert t.id_avg("Router+RM (no norm)") <= t.id_avg("Router+RM")
    assert "Router+RM" in t.format() and "routing accuracy" in t.format()
    with pytest.raises(RouterMismatchError, match="do not match"):
        reward_scores(evals["colors"], ids, {"colors": models["colors"]}, normalizers)
