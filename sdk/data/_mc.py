"""The multiple-choice categories: three client tasks and four held-out ones.

Each is designed to be learnable by a tiny VLM in CPU-minutes: large objects, saturated colours,
fixed positions where reading is involved, big margins between the answers.
"""

from __future__ import annotations

import random

from PIL import Image, ImageChops, ImageDraw

from sdk.data._category import MultipleChoiceCategory
from sdk.data._draw import COLORS, blank, draw_shape, draw_text_centered

__all__ = [
    "BAR_COLORS",
    "SHAPES",
    "ColorCategory",
    "CountCategory",
    "DiagramCategory",
    "PositionCategory",
    "PosterCategory",
    "TableCategory",
    "TextCategory",
    "bar_layout",
    "draw_bar_chart",
    "draw_red_blue",
    "shade",
]

BAR_COLORS: tuple[str, ...] = ("red", "green", "blue", "yellow")
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
# (dx, dy) of the red shape's centre from the image centre (position tasks), in side fractions.
RED_OFFSETS = ((-0.33, 0.0), (0.33, 0.0), (0.0, -0.33), (0.0, 0.33))


def bar_layout(size: int) -> tuple[list[tuple[int, int]], int, int]:
    """Fixed bar geometry: ``([(x_left, x_right)] per bar, baseline_y, plot_height)``."""
    width = round(size * 0.16)
    gap = round(size * 0.06)
    start = (size - 4 * width - 3 * gap) // 2
    columns = [(start + i * (width + gap), start + i * (width + gap) + width - 1) for i in range(4)]
    baseline = round(size * 0.9)
    return columns, baseline, round(size * 0.8)


def shade(image: Image.Image) -> Image.Image:
    """Shade the scene: green fades downwards and blue leftwards, to half at the far edge.

    A tiny vision tower has no absolute position embedding, so on a flat picture a red patch
    looks the same anywhere and moving a shape leaves every pooled (linear) image feature
    unchanged; under a multiplicative light the shape's contrast to the floor, and so the pooled
    features, depend on where it is, as shading does in a photo.
    """
    size = image.width
    ramp = Image.linear_gradient("L").resize((size, size)).point(lambda v: 255 - v // 2)
    full = Image.new("L", (size, size), 255)
    across = ramp.transpose(Image.Transpose.ROTATE_90).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return ImageChops.multiply(image, Image.merge("RGB", (full, ramp, across)))


def draw_bar_chart(
    rng: random.Random, image: Image.Image, *, grid: bool
) -> tuple[Image.Image, int]:
    """Four fixed-colour bars at fixed places on ``image``, one clearly tallest; its index."""
    size = image.width
    columns, baseline, plot = bar_layout(size)
    tallest = rng.randrange(4)
    top = rng.uniform(0.65, 1.0)
    # Every other bar is at least 25% of the plot shorter: a clear winner.
    heights = [rng.uniform(0.15, top - 0.25) for _ in range(4)]
    heights[tallest] = top
    draw = ImageDraw.Draw(image)
    if grid:
        for step in range(1, 5):
            y = baseline - round(plot * step / 4)
            draw.line((0, y, size - 1, y), fill=(190, 190, 190))
    for (left, right), height, color in zip(columns, heights, BAR_COLORS, strict=True):
        draw.rectangle((left, baseline - round(height * plot), right, baseline), fill=COLORS[color])
    draw.line((0, baseline + 1, size - 1, baseline + 1), fill=COLORS["black"])
    return image, tallest


def draw_red_blue(
    rng: random.Random, size: int, *, half: float, floor: int
) -> tuple[Image.Image, int]:
    """A blue shape at the centre, a red one left/right/above/below it, shaded; the relation."""
    relation = rng.randrange(4)
    side = size * half
    blue = (size / 2 + rng.uniform(-0.03, 0.03) * size, size / 2 + rng.uniform(-0.03, 0.03) * size)
    dx, dy = RED_OFFSETS[relation]
    red = (
        size * (0.5 + dx + rng.uniform(-0.04, 0.04)),
        size * (0.5 + dy + rng.uniform(-0.04, 0.04)),
    )
    image = blank(size, (floor, floor, floor))
    draw = ImageDraw.Draw(image)
    for (x, y), color in zip((red, blue), ("red", "blue"), strict=True):
        draw_shape(
            draw, rng.choice(SHAPES), (x - side, y - side, x + side, y + side), COLORS[color]
        )
    return shade(image), relation


class DiagramCategory(MultipleChoiceCategory):
    """Bar chart of four fixed-colour bars at fixed places: which bar is tallest?"""

    name = "diagram"
    choices = BAR_COLORS

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        image, tallest = draw_bar_chart(rng, blank(size), grid=False)
        return image, "Which bar is tallest?", tallest


class PositionCategory(MultipleChoiceCategory):
    """Where is the red shape relative to the blue one?

    The blue reference shape sits at the centre and the red one in one of four zones around it,
    over a light two-axis gradient (like sky above and ground below in a photo). A tiny vision
    tower has no absolute position embedding, so on a flat background a red patch looks the same
    anywhere, and a free-floating pair is learned only up to the axis. The gradient gives each
    zone its own context, as real scenes do.
    """

    name = "position"
    choices = ("left", "right", "above", "below")

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        image, relation = draw_red_blue(rng, size, half=0.13, floor=150)
        return image, "Where is the red shape relative to the blue shape?", relation


class PosterCategory(MultipleChoiceCategory):
    """One of four words in a large font at a FIXED place on a white poster."""

    name = "poster"
    choices = ("SALE", "OPEN", "STOP", "EXIT")

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        word = rng.randrange(4)
        # Only the surroundings vary (a light background tint); the text never moves.
        tint = tuple(rng.randrange(170, 236) for _ in range(3))
        image = blank(size, (tint[0], tint[1], tint[2]))
        draw = ImageDraw.Draw(image)
        draw.rectangle(
            (size * 0.06, size * 0.3, size * 0.94, size * 0.7),
            fill=COLORS["white"],
            outline=COLORS["black"],
        )
        draw_text_centered(draw, self.choices[word], (size / 2, size / 2), round(size * 0.26))
        return image, "Which word is on the poster?", word


class ColorCategory(MultipleChoiceCategory):
    """Held out: the colour of the single shape."""

    name = "color"
    choices = BAR_COLORS

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        color = rng.randrange(4)
        side = rng.uniform(0.3, 0.5) * size
        x, y = rng.uniform(0.05, 0.95) * (size - side), rng.uniform(0.05, 0.95) * (size - side)
        image = blank(size)
        draw_shape(
            ImageDraw.Draw(image),
            rng.choice(SHAPES),
            (x, y, x + side, y + side),
            COLORS[self.choices[color]],
        )
        return image, "What color is the shape?", color


class CountCategory(MultipleChoiceCategory):
    """Held out: how many dots (1-4), placed in distinct cells of a 3x3 grid."""

    name = "count"
    choices = ("1", "2", "3", "4")

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        count = rng.randrange(4)
        cell = size / 3
        radius = size * 0.08
        image = blank(size)
        draw = ImageDraw.Draw(image)
        for index in rng.sample(range(9), count + 1):
            cx = (index % 3 + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
            cy = (index // 3 + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
            draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=COLORS["black"])
        return image, "How many dots are there?", count


class TableCategory(MultipleChoiceCategory):
    """Held out: a 2x2 grid holding the digits 1-4; the value at row r, column c."""

    name = "table"
    choices = ("1", "2", "3", "4")

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        values = rng.sample(range(4), 4)  # values[row * 2 + col] is a choice index
        row, col = rng.randrange(2), rng.randrange(2)
        lo, hi = size * 0.08, size * 0.92
        mid = (lo + hi) / 2
        image = blank(size)
        draw = ImageDraw.Draw(image)
        draw.rectangle((lo, lo, hi, hi), outline=COLORS["black"], width=2)
        draw.line((mid, lo, mid, hi), fill=COLORS["black"], width=2)
        draw.line((lo, mid, hi, mid), fill=COLORS["black"], width=2)
        for r in range(2):
            for c in range(2):
                center = ((lo + mid) / 2 + c * (mid - lo), (lo + mid) / 2 + r * (mid - lo))
                draw_text_centered(draw, self.choices[values[r * 2 + c]], center, round(size * 0.3))
        question = f"What is the value at row {row + 1}, column {col + 1}?"
        return image, question, values[row * 2 + col]


class TextCategory(MultipleChoiceCategory):
    """Held out: which of four digit strings is written (fixed place, large font)."""

    name = "text"
    choices = ("305", "718", "462", "951")

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        digits = rng.randrange(4)
        image = blank(size)
        draw = ImageDraw.Draw(image)
        draw_text_centered(draw, self.choices[digits], (size / 2, size / 2), round(size * 0.3))
        # Variety away from the digits: a coloured stripe of random length below them.
        start = rng.uniform(0.05, 0.5) * size
        stripe = (start, size * 0.8, start + rng.uniform(0.1, 0.45) * size, size * 0.88)
        draw.rectangle(stripe, fill=COLORS[rng.choice(BAR_COLORS)])
        return image, "Which number is written?", digits
