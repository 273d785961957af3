"""A stand-in reward model whose normalizer declares c = 3 and which scores every item 2.5:
what a member gets after swapping a c = 1 model for a retrained one (client apps started by
``test_apps_reannounce.py`` load it as ``tests.apps._wide_scorer:WideScorer``)."""

from __future__ import annotations

from PIL import Image

SCORE = 2.5


class WideScorer:
    """Every item scores :data:`SCORE`; its own bound is 3."""

    clip = 3.0

    def score(self, images: list[Image.Image], prompts: list[str],
              responses: list[str]) -> list[float]:
        """:data:`SCORE` for each item."""
        return [SCORE] * len(images)
