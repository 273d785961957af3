"""The category interface: one synthetic task that can draw a labelled item from a seeded RNG."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum

from PIL import Image

__all__ = [
    "Category",
    "CategoryKind",
    "Item",
    "MultipleChoiceCategory",
    "format_option",
    "multiple_choice_prompt",
]

_LETTERS = "ABCDEFGH"


class CategoryKind(str, Enum):
    """How a category's responses look."""

    MULTIPLE_CHOICE = "multiple_choice"
    OPEN = "open"


@dataclass(frozen=True)
class Item:
    """One rendered example: the preferred response and the ones it beats.

    ``options`` holds every multiple-choice response in its fixed order (empty for open ones).
    """

    image: Image.Image
    prompt: str
    chosen: str
    rejected_choices: tuple[str, ...]
    options: tuple[str, ...]


def format_option(index: int, text: str) -> str:
    """The response for option ``index``: ``"B. green"``."""
    return f"{_LETTERS[index]}. {text}"


def multiple_choice_prompt(question: str, options: tuple[str, ...]) -> str:
    """The prompt of a multiple-choice item: the question, the lettered options, the instruction."""
    listed = " ".join(options)
    return f"{question} Options: {listed}. Answer with one option."


class Category(ABC):
    """A synthetic category. Subclasses set ``name`` and ``kind`` and implement :meth:`draw`."""

    name: str
    kind: CategoryKind

    @abstractmethod
    def draw(self, rng: random.Random, size: int) -> Item:
        """Render one item on a ``size`` x ``size`` image, using only ``rng`` for randomness."""


class MultipleChoiceCategory(Category):
    """A question with a FIXED option order (shuffled options were not learnable at tiny scale).

    Subclasses give ``choices`` and implement :meth:`render`, returning the image, the question
    and the index of the correct choice.
    """

    kind = CategoryKind.MULTIPLE_CHOICE
    choices: tuple[str, ...]

    @abstractmethod
    def render(self, rng: random.Random, size: int) -> tuple[Image.Image, str, int]:
        """Return ``(image, question, correct_index)``."""

    def options(self) -> tuple[str, ...]:
        """All responses in their fixed order, e.g. ``("A. red", "B. green", ...)``."""
        return tuple(format_option(i, text) for i, text in enumerate(self.choices))

    def draw(self, rng: random.Random, size: int) -> Item:
        image, question, correct = self.render(rng, size)
        options = self.options()
        prompt = multiple_choice_prompt(question, options)
        wrong = tuple(o for i, o in enumerate(options) if i != correct)
        return Item(image, prompt, options[correct], wrong, options)
