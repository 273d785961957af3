"""Toy preference pairs (color of a square: learnable in a few steps) and tiny backbones."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from sdk.models import ARCHITECTURES, build_tiny_vlm

COLORS = {"red": (230, 20, 20), "blue": (20, 20, 230), "green": (20, 200, 20),
          "yellow": (230, 230, 20)}


@dataclass(frozen=True)
class ToyPair:
    """Shaped like ``sdk.data.PreferencePair``."""

    id: str
    image: Image.Image
    prompt: str
    chosen: str
    rejected: str
    category: str = "color"


def make_pairs(n: int, seed: int) -> list[ToyPair]:
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        right = rng.choice(list(COLORS))
        wrong = rng.choice([c for c in COLORS if c != right])
        # A large square on white: colour fills most patches, so a few steps suffice.
        image = Image.new("RGB", (84, 84), (255, 255, 255))
        x = rng.randint(0, 12)
        ImageDraw.Draw(image).rectangle([x, x, x + 70, x + 70], fill=COLORS[right])
        pairs.append(ToyPair(f"{seed}-{i}", image, "What color is the square?",
                             f"The square is {right}.", f"The square is {wrong}."))
    return pairs


@pytest.fixture(scope="session")
def backbones(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backbones")
    corpus = [t for p in make_pairs(50, 99) for t in (p.prompt, p.chosen, p.rejected)]
    return {arch: build_tiny_vlm(arch, root / arch, corpus=corpus) for arch in ARCHITECTURES}


@pytest.fixture(scope="session")
def train_pairs() -> list[ToyPair]:
    return make_pairs(256, 0)


@pytest.fixture(scope="session")
def eval_pairs() -> list[ToyPair]:
    return make_pairs(48, 1)
