"""Names of the synthetic categories and clients, and the registry that maps a name to its task."""

from __future__ import annotations

from types import MappingProxyType

from sdk.data._category import Category
from sdk.data._mc import (
    ColorCategory,
    CountCategory,
    DiagramCategory,
    PositionCategory,
    PosterCategory,
    TableCategory,
    TextCategory,
)
from sdk.data._scenes import DetailCategory, SafetyCategory
from sdk.data._variants import ChartCategory, RelationCategory, SignCategory

__all__ = [
    "ALL_CATEGORIES",
    "CATEGORIES",
    "DEFAULT_CLIENTS",
    "HELDOUT_CATEGORIES",
    "MULTIPLE_CHOICE_CATEGORIES",
    "PREFERENCE_CLIENTS",
    "STYLE_CATEGORIES",
    "TASK_CLIENTS",
    "UNRELATED_CATEGORIES",
    "VARIANT_CATEGORIES",
    "get_category",
]

TASK_CLIENTS: tuple[str, ...] = ("diagram", "poster", "position")
"""Task heterogeneity: one multiple-choice category per client (like MME-RealWorld's split)."""

PREFERENCE_CLIENTS: tuple[str, ...] = ("detail", "safety")
"""Preference heterogeneity: two clients that judge the same kind of image differently."""

DEFAULT_CLIENTS: tuple[str, ...] = TASK_CLIENTS + PREFERENCE_CLIENTS
"""The five client categories of the benchmark: the task clients, then the preference clients."""
VARIANT_CATEGORIES: tuple[str, ...] = ("chart", "sign", "relation")
"""Held out, near transfer: ``diagram``, ``poster`` and ``position`` asked in other words and looks."""

UNRELATED_CATEGORIES: tuple[str, ...] = ("color", "count", "table", "text")
"""Held out, far transfer: tasks no client has anything like."""

HELDOUT_CATEGORIES: tuple[str, ...] = VARIANT_CATEGORIES + UNRELATED_CATEGORIES
"""Never given to a client: cross-category generalization."""

STYLE_CATEGORIES: tuple[str, ...] = PREFERENCE_CLIENTS
"""Categories judged on open answers by style (the preference clients)."""
MULTIPLE_CHOICE_CATEGORIES: tuple[str, ...] = TASK_CLIENTS + HELDOUT_CATEGORIES
"""Categories whose queries are multiple choice with one right option."""
ALL_CATEGORIES: tuple[str, ...] = DEFAULT_CLIENTS + HELDOUT_CATEGORIES
"""Every category: the clients' and the held-out ones."""

_REGISTRY: dict[str, Category] = {
    category.name: category
    for category in (
        DiagramCategory(),
        PosterCategory(),
        PositionCategory(),
        DetailCategory(),
        SafetyCategory(),
        ChartCategory(),
        SignCategory(),
        RelationCategory(),
        ColorCategory(),
        CountCategory(),
        TableCategory(),
        TextCategory(),
    )
}
CATEGORIES: MappingProxyType[str, Category] = MappingProxyType(_REGISTRY)
"""Every category by name (read-only)."""


def get_category(name: str) -> Category:
    """The category called ``name``; a ``KeyError`` lists the known ones."""
    try:
        return CATEGORIES[name]
    except KeyError:
        raise KeyError(f"unknown category {name!r}; known: {', '.join(ALL_CATEGORIES)}") from None
