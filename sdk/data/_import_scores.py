"""``scores`` sources: several rated responses per image and prompt become preference pairs.

A response's score is the mean of its ratings on the chosen aspects; every two responses whose
scores differ by at least ``min_margin`` make one pair (the higher one chosen), as the paper
converts VLFeedback. A rating is a number, numeric text, or VLFeedback's ``{"Rating": "4"}``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from sdk.data._import_config import ImportSummary
from sdk.data._import_items import Columns, Item
from sdk.data._import_rows import Row

__all__ = ["scores_item"]


def _rating(value: Any) -> float | None:
    """A rating as a number; ``None`` when it is absent or not a number (e.g. ``"N/A"``)."""
    if isinstance(value, dict):
        value = value.get("Rating", value.get("rating"))
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not math.isnan(value):
        return float(value)
    return None


def _aspect_keys(row: Row, index: int, ratings: dict[str, Any], aspects: tuple[str, ...]
                 ) -> list[str]:
    """The keys of ``ratings`` for the chosen ``aspects``, matched case-insensitively (every
    key when none is chosen); an aspect the response does not carry is named with those it
    does."""
    if not aspects:
        return sorted(ratings)
    keys = {str(key).strip().lower(): key for key in ratings}
    unknown = [a for a in aspects if a.strip().lower() not in keys]
    if unknown:
        raise row.error(f"response {index}: unknown aspect(s) {unknown}; its aspects are "
                        f"{sorted(ratings)}")
    return [keys[a.strip().lower()] for a in aspects]


def _scored(row: Row, columns: Columns, responses: list[Any], summary: ImportSummary
            ) -> list[tuple[str, float]]:
    """``(text, score)`` of each response rated on every aspect; the others are dropped."""
    aspects = columns.config.aspects
    scored = []
    for index, response in enumerate(responses, start=1):
        if not isinstance(response, dict):
            raise row.error(f"response {index} is not an object")
        text = columns.text(row, "text", columns.value(Row(response, row.file, row.number,
                                                             row.base), "text"))
        ratings = columns.value(Row(response, row.file, row.number, row.base), "ratings")
        if not isinstance(ratings, dict) or not ratings:
            raise row.error(f"response {index}: ratings must be an object of aspect: rating")
        values = [_rating(ratings[key]) for key in _aspect_keys(row, index, ratings, aspects)]
        if any(v is None for v in values):
            summary.drop("response without a numeric rating on every aspect")
            continue
        scored.append((text, sum(v for v in values if v is not None) / len(values)))
    return scored


def scores_item(row: Row, columns: Columns, summary: ImportSummary) -> Item | None:
    """The pairs of one ``scores`` record (``None`` when no two responses differ enough)."""
    responses = columns.value(row, "responses")
    if not isinstance(responses, list):
        raise row.error("field 'responses' must be a list of responses")
    scored = _scored(row, columns, responses, summary)
    pairs: list[tuple[str, str]] = []
    for (text_a, score_a), (text_b, score_b) in itertools.combinations(scored, 2):
        if text_a == text_b:
            summary.drop("two responses with the same text")
        elif abs(score_a - score_b) < columns.config.min_margin:
            summary.drop("response pair under the minimum margin")
        else:
            pairs.append((text_a, text_b) if score_a > score_b else (text_b, text_a))
    if not pairs:
        summary.drop("record without a pair over the margin")
        return None
    return Item(row, columns.id(row), columns.frames(row, "image"), columns.text(row, "prompt"),
                columns.category(row), pairs)
