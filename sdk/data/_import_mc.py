"""``mc`` sources: a multiple-choice item becomes pairs (the right option preferred) and a query.

The prompt and responses take the synthetic benchmark's option template (``format_option`` and
``multiple_choice_prompt``), so imported and synthetic items read alike;
options already lettered (``"(A) red"``, ``"A. red"``) lose their letters first. The answer may
be the option's text, its letter or its 0-based index.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from sdk.data._category import format_option, multiple_choice_prompt
from sdk.data._import_config import ImportSummary
from sdk.data._import_items import Columns, Item
from sdk.data._import_rows import Row

__all__ = ["mc_item"]

_LETTERS = "ABCDEFGH"
_LETTERED = re.compile(r"^\s*\(?([A-H])[).:]\s*(.+?)\s*$", re.DOTALL)


def _options(row: Row, value: Any) -> list[str]:
    if isinstance(value, str):  # a JSON/CSV cell may hold the options as one text
        value = [part for part in value.split("|")]
    if not isinstance(value, list) or not all(isinstance(o, str) and o.strip() for o in value):
        raise row.error("field 'options' must be a list of non-empty texts")
    if not 2 <= len(value) <= len(_LETTERS):
        raise row.error(f"field 'options' has {len(value)} options; 2 to {len(_LETTERS)} allowed")
    matches = [_LETTERED.match(o) for o in value]
    if all(m is not None for m in matches) and [m.group(1) for m in matches if m] == list(
        _LETTERS[: len(value)]
    ):
        return [m.group(2) for m in matches if m]
    return [o.strip() for o in value]


def _answer_index(row: Row, value: Any, raw: list[Any], options: list[str]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(options):
        return value
    text = str(value).strip()
    for candidates in (options, [str(o).strip() for o in raw]):
        if text in candidates:
            return candidates.index(text)
    letter = text.strip("().: ")
    if len(letter) == 1 and letter.upper() in _LETTERS[: len(options)]:
        return _LETTERS.index(letter.upper())
    raise row.error(f"answer is not one of the {len(options)} options, a letter or an index")


def mc_item(row: Row, columns: Columns, summary: ImportSummary) -> Item | None:
    """The pairs and the query of one multiple-choice record."""
    raw = columns.value(row, "options")
    options = _options(row, raw)
    if len(set(options)) != len(options):
        raise row.error("field 'options' repeats an option")
    correct = _answer_index(row, columns.value(row, "answer"), raw if isinstance(raw, list)
                            else options, options)
    lettered = tuple(format_option(i, text) for i, text in enumerate(options))
    item_id = columns.id(row)
    wrong = [o for i, o in enumerate(lettered) if i != correct]
    if columns.config.wrong == "one":
        # Seeded by the salt and the id: a re-import draws the same wrong option.
        seed = hashlib.sha256(f"{columns.config.salt}\0wrong\0{item_id}".encode()).hexdigest()
        wrong = [random.Random(seed).choice(wrong)]
    question = columns.text(row, "question")
    return Item(row, item_id, columns.frames(row, "image"), multiple_choice_prompt(question, lettered),
                columns.category(row), [(lettered[correct], w) for w in wrong],
                answer=lettered[correct], options=lettered)
