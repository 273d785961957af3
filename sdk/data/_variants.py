"""Held-out variants of the client tasks: the same skill, another question and another look.

The four unrelated held-out categories (colour, count, table, text) measure whether anything
transfers to a task no client has; every client reward model is at chance there, so routing
cannot help or hurt. These three measure near transfer, as the paper's held-out categories do:
each asks what one client's task asks, in other words and in another visual style, so that the
right client's reward model can still judge it and a router has to find that client.
"""

from __future__ import annotations

import random

from PIL import Image, ImageDraw

from sdk.data._category import MultipleChoiceCategory
from sdk.data._draw import COLORS, blank, draw_text_centered
from sdk.data._mc import (
    BAR_COLORS,
    PositionCategory,
    PosterCategory,
    draw_bar_chart,
    draw_red_blue,
)

__all__ = ["ChartCategory", "RelationCategory", "SignCategory"]


class ChartCategory(MultipleChoiceCategory):
    """Variant of ``diagram``: the bars stand on a tinted, gridded panel; the question reworded."""

    name = "chart"
    choices = BAR_COLORS

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        tint = rng.randrange(215, 240), rng.randrange(215, 240)
        image, tallest = draw_bar_chart(rng, blank(size, (*tint, 245)), grid=True)
        return image, "Which colour has the highest bar in this chart?", tallest


class SignCategory(MultipleChoiceCategory):
    """Variant of ``poster``: the same words on a yellow road sign with a thick border."""

    name = "sign"
    choices = PosterCategory.choices

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        word = rng.randrange(4)
        gray = rng.randrange(90, 160)
        image = blank(size, (gray, gray, gray))
        draw = ImageDraw.Draw(image)
        draw.rectangle(
            (size * 0.06, size * 0.3, size * 0.94, size * 0.7),
            fill=COLORS["yellow"],
            outline=COLORS["black"],
            width=max(2, size // 28),
        )
        draw_text_centered(draw, self.choices[word], (size / 2, size / 2), round(size * 0.26))
        return image, "What does the sign say?", word


class RelationCategory(MultipleChoiceCategory):
    """Variant of ``position``: smaller shapes, the question reworded.

    The floor stays as it is: the shading is what makes position perceivable at all, and a
    position reward model cannot see the shapes on a much darker floor, so that would test the
    lighting rather than the task."""

    name = "relation"
    choices = PositionCategory.choices

    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        image, relation = draw_red_blue(rng, size, half=0.10, floor=150)
        question = "Is the red object left of, right of, above or below the blue one?"
        return image, question, relation
