"""LiRA inside the audit: shadow reward models trained by the auditor on the client's own data.

The auditor holds the run's data, so it can do what a strong attacker with data from the same
distribution does: train ``n_shadow`` reward models with the client's recipe (from its own
base checkpoint, attacks._shadow_base; its LoRA adapters if it has any, Bradley-Terry for
``shadow_steps`` steps, and its record-level DP-SGD settings when its checkpoint recorded them: a DP-trained or an adapter-trained
client must be calibrated against shadows trained the same way) on the population pairs plus a
random half of the candidates, and calibrate every candidate's margin against the shadows that
did and did not train on it (attacks._membership.lira_attack). Shadows are cached by training
set, so the raw and the normalized view reuse the same models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attacks._errors import AttackInputError
from attacks._membership import LiraConfig, lira_attack
from attacks._report import MembershipReport, membership_report
from attacks._shadow_base import ShadowBase

if TYPE_CHECKING:
    from sdk.models import Runtime
    from sdk.reward import RewardTrainingConfig

__all__ = ["Candidates", "lira_reports", "pick_candidates"]


@dataclass(frozen=True)
class Candidates:
    """An audit's candidate pairs (members first, as many non-members) and the population the
    shadows train on besides half of the candidates."""

    members: list[Any]
    non_members: list[Any]
    population: list[Any]


def pick_candidates(who: str, train: Sequence[Any], held: Sequence[Any], max_pairs: int,
                    seed: int) -> Candidates:
    """``max_pairs`` members drawn from ``train`` and as many non-members from ``held``
    (fewer when either runs short); the population is the pairs left over, about as many as
    the target trained on (the candidates' IN half comes on top)."""
    rng = np.random.default_rng(seed)
    n = min(max_pairs, len(train), len(held))
    if n == 0:
        raise AttackInputError(
            f"client {who}: needs train and eval pairs, got {len(train)} / {len(held)}"
        )
    mem_idx = np.sort(rng.choice(len(train), n, replace=False))
    non_idx = np.sort(rng.choice(len(held), n, replace=False))
    taken, held_taken = set(mem_idx.tolist()), set(non_idx.tolist())
    rest = [p for i, p in enumerate(train) if i not in taken]
    rest += [p for i, p in enumerate(held) if i not in held_taken]
    return Candidates([train[int(i)] for i in mem_idx], [held[int(i)] for i in non_idx],
                      rest[: max(len(train) - n, 0)])


class _Shadows:
    """Trains (and caches) shadow reward models; margins of the candidates, (2n, 2) raw and
    normalized with the shadow's own normalizer (a shadow mimics a client end to end)."""

    def __init__(
        self,
        pairs: Sequence[Any],
        base: ShadowBase,
        recipe: RewardTrainingConfig,
        clip: float,
        seed: int,
        say: Callable[[str], None],
    ) -> None:
        self.pairs, self.base, self.recipe = pairs, base, recipe
        self.clip, self.seed, self.say = clip, seed, say
        self.cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.candidates: list[int] = []
        self.planned = 0
        self.runtime: Runtime | None = None

    def margins(self, train: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        key = tuple(sorted(train))
        if key not in self.cache:
            self.cache[key] = self._train([self.pairs[i] for i in key])
        return self.cache[key]

    def _train(self, train: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        from sdk.reward import RewardModel, train_reward_model

        s = len(self.cache)
        start = time.perf_counter()
        self.say(f"shadow model {s + 1}/{self.planned}: training on {len(train)} pairs")
        torch.manual_seed(self.seed + s)
        cfg = self.recipe.model_copy(
            update={"seed": self.seed + s, "eval_every": 0, "clip_bound": self.clip,
                    "fit_normalizer": True}
        )
        # Every shadow starts from the target's base; the seed sets its head and adapters.
        model = RewardModel.from_backbone(self.base.path, lora=cfg.lora,
                                          runtime=self.runtime)
        result = train_reward_model(model, train, [], cfg, progress=False)
        cand = [self.pairs[i] for i in self.candidates]
        images, prompts = [p.image for p in cand], [p.prompt for p in cand]
        raw = torch.stack(
            [
                model.score(images, prompts, [p.chosen for p in cand]),
                model.score(images, prompts, [p.rejected for p in cand]),
            ],
            1,
        ).double()
        assert result.normalizer is not None  # fit_normalizer is on by default
        norm = result.normalizer.normalize(raw)
        private = "" if cfg.dp is None else f", DP-SGD epsilon {result.spent_epsilon:.3g}"
        adapters = "" if cfg.lora is None else f", LoRA rank {cfg.lora.r}"
        self.say(
            f"shadow model {s + 1}/{self.planned} ({self.base.label}{adapters}, "
            f"{len(train)} pairs, {result.steps} steps{private}) trained in "
            f"{time.perf_counter() - start:.0f} s"
        )
        return raw.numpy(), norm.numpy()


def lira_reports(
    client: str,
    views: Sequence[tuple[str, np.ndarray]],
    candidates: Sequence[Any],
    population: Sequence[Any],
    *,
    base: ShadowBase,
    recipe: RewardTrainingConfig,
    n_shadow: int,
    clip: float,
    n_boot: int,
    seed: int,
    say: Callable[[str], None],
    runtime: Runtime | None = None,
    normalized_from: int = 1,
) -> list[MembershipReport]:
    """LiRA on each view ``(name, target margins (2n, 2))`` of the 2n candidates (first n
    members); views before ``normalized_from`` are raw, the others normalized and clipped at
    ``clip`` (a live member's answers: all of them, ``normalized_from=0``). Every shadow
    starts from ``base`` (attacks._shadow_base) and trains with ``recipe`` (the target's: its
    steps, batch, learning rate, LoRA adapters and DP-SGD), seeded apart, on ``runtime``'s
    device and dtype."""
    pairs = list(candidates) + list(population)
    n2 = len(candidates)
    shadows = _Shadows(pairs, base, recipe, clip, seed, say)
    shadows.runtime = runtime
    shadows.candidates = list(range(n2))
    shadows.planned = n_shadow
    cfg = LiraConfig(n_shadow=n_shadow, seed=seed)
    pop_idx = list(range(n2, len(pairs)))
    out = []
    for v, (name, target) in enumerate(views):
        which = 0 if v < normalized_from else 1

        def target_scorer(idx: Sequence[int], t: np.ndarray = target) -> np.ndarray:
            i = np.asarray(idx, dtype=np.int64)
            return np.asarray(t[i, 0] - t[i, 1])

        def train_shadow(
            train: Sequence[int], w: int = which
        ) -> Callable[[Sequence[int]], np.ndarray]:
            m = shadows.margins(train)[w]

            def score(idx: Sequence[int]) -> np.ndarray:
                i = np.asarray(idx, dtype=np.int64)
                return np.asarray(m[i, 0] - m[i, 1])

            return score

        attack = lira_attack(
            target_scorer,
            list(range(n2 // 2)),
            list(range(n2 // 2, n2)),
            train_shadow,
            population=pop_idx,
            config=cfg,
        )
        out.append(
            membership_report(
                attack,
                setting=f"{client}: {name}, LiRA ({n_shadow} shadow models)",
                n_boot=n_boot,
                seed=seed,
            )
        )
    return out
