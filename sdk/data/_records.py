"""Record types: a preference pair (client side) and a query (policy side)."""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image

__all__ = ["PreferencePair", "Query"]


@dataclass(frozen=True)
class PreferencePair:
    """One preference judgement: for ``(image, prompt)``, ``chosen`` beats ``rejected``.

    ``image`` is a loaded RGB image.
    """

    id: str
    image: Image.Image
    prompt: str
    chosen: str
    rejected: str
    category: str


@dataclass(frozen=True)
class Query:
    """A public prompt for the policy (warm-up, GRPO or evaluation).

    ``answer`` is the correct response where the split carries one (``None`` for the GRPO query
    set); ``options`` lists the multiple-choice responses in their fixed order, and is empty for
    open generation.
    """

    id: str
    image: Image.Image
    prompt: str
    category: str
    answer: str | None = None
    options: tuple[str, ...] = field(default_factory=tuple)
