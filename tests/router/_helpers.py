"""Shared builders for the router tests: tiny routers and two distinguishable synthetic clients."""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from sdk.router import EncodedBatch, HashingEncoder, Router, RouterConfig

COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 180, 30)}


def tiny_router(
    input_dim: int = 16, clients: tuple[str, ...] = ("a", "b"), seed: int = 0
) -> Router:
    cfg = RouterConfig(
        input_dim=input_dim, d_model=16, num_layers=2, num_heads=2, dim_feedforward=32, seed=seed
    )
    return Router(cfg, list(clients), encoder_id="test-encoder")


def _color_item(rng: random.Random) -> tuple[Image.Image, str, str, str]:
    name, other = rng.sample(sorted(COLORS), 2)
    img = Image.new("RGB", (32, 32), (255, 255, 255))
    x, y = rng.randint(0, 14), rng.randint(0, 14)
    ImageDraw.Draw(img).rectangle((x, y, x + 16, y + 16), fill=COLORS[name])
    return img, "What color is the shape in the image?", f"The shape is {name}.", f"It is {other}."


def _chart_item(rng: random.Random) -> tuple[Image.Image, str, str, str]:
    heights = [rng.randint(4, 28) for _ in range(3)]
    img = Image.new("RGB", (32, 32), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for i, h in enumerate(heights):
        draw.rectangle((2 + 10 * i, 31 - h, 8 + 10 * i, 31), fill=(40, 40, 40))
    names = ["left", "middle", "right"]
    best = names[heights.index(max(heights))]
    worst = names[heights.index(min(heights))]
    return img, "Which bar in the chart is the tallest?", f"The {best} bar.", f"The {worst} bar."


def client_responses(encoder: HashingEncoder, kind: str, num_pairs: int, seed: int) -> EncodedBatch:
    """Encode chosen and rejected responses of ``num_pairs`` pairs of one client's category."""
    rng = random.Random(seed)
    make = _color_item if kind == "color" else _chart_item
    images, prompts, responses = [], [], []
    for _ in range(num_pairs):
        img, prompt, chosen, rejected = make(rng)
        for resp in (chosen, rejected):  # the same image for both: encoded once (cache)
            images.append(img)
            prompts.append(prompt)
            responses.append(resp)
    return encoder.encode(images, prompts, responses)
