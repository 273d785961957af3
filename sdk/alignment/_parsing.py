"""Strict multiple-choice answer parsing.

A response counts as an answer only when, after trimming whitespace, dropping one trailing period
and case-folding, it equals exactly one option. Accepting an option mentioned *anywhere* let the
output format drift during GRPO (DESIGN.md), so anything else parses to ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["is_correct", "normalize_answer", "parse_choice"]


def normalize_answer(text: str) -> str:
    """Collapse whitespace, drop one trailing period, case-fold."""
    text = " ".join(text.split())
    if text.endswith("."):
        text = text[:-1].rstrip()
    return text.casefold()


def parse_choice(response: str, options: Sequence[str]) -> int | None:
    """Index of the option that ``response`` states exactly, or ``None``."""
    said = normalize_answer(response)
    matches = [i for i, option in enumerate(options) if normalize_answer(option) == said]
    return matches[0] if len(matches) == 1 else None


def is_correct(response: str, answer: str, options: Sequence[str]) -> bool:
    """True when ``response`` parses strictly to ``answer`` (open questions: exact match)."""
    if not options:
        return normalize_answer(response) == normalize_answer(answer)
    index = parse_choice(response, options)
    return index is not None and normalize_answer(options[index]) == normalize_answer(answer)
