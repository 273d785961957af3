"""What the synthetic pairs say: heterogeneity, formats, and answers checked against pixels."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from sdk.data import (
    HELDOUT_CATEGORIES,
    MULTIPLE_CHOICE_CATEGORIES,
    SynthManifest,
    load_pairs,
    load_queries,
)
from sdk.data._catalog import DEFAULT_CLIENTS, get_category
from sdk.data._category import CategoryKind, Item
from sdk.data._draw import COLORS
from sdk.data._mc import BAR_COLORS, bar_layout


def _items(name: str, count: int = 60, seed: int = 0) -> list[Item]:
    rng = random.Random(seed)
    return [get_category(name).draw(rng, 84) for _ in range(count)]


def _answer_index(item: Item) -> int:
    return item.options.index(item.chosen)


def _mask(item: Item, color: str, tolerance: int = 40) -> np.ndarray:
    pixels = np.asarray(item.image, dtype=np.int32)  # (H, W, 3)
    return np.abs(pixels - np.array(COLORS[color])).max(axis=2) < tolerance  # (H, W)


def test_detail_prefers_long_and_safety_prefers_short(bench: SynthManifest) -> None:
    detail = load_pairs(bench.client_dir("detail"))
    safety = load_pairs(bench.client_dir("safety"))
    assert all(len(p.chosen.split()) > 3 * len(p.rejected.split()) for p in detail)
    assert all(len(p.chosen.split()) * 3 < len(p.rejected.split()) for p in safety)
    # The two clients never share a prompt: a router can tell them apart from the text.
    assert not {p.prompt for p in detail} & {p.prompt for p in safety}
    assert all(
        len(p.chosen.split()) <= 40 and len(p.rejected.split()) <= 40 for p in detail + safety
    )


def test_safety_answers_name_the_hazard_the_description_mentions(bench: SynthManifest) -> None:
    pairs = load_pairs(bench.client_dir("safety"))
    with_hazard = 0
    for pair in pairs:
        hazards = [h for h in ("fire", "warning sign") if h in pair.rejected]
        if hazards:
            with_hazard += 1
            assert hazards[0] in pair.chosen and "No hazard" not in pair.chosen
        else:
            assert "no hazard visible" in pair.chosen.lower()
    assert 0 < with_hazard < len(pairs)


def test_multiple_choice_pairs_have_fixed_options_and_short_texts(bench: SynthManifest) -> None:
    for name in ("diagram", "poster", "position"):
        pairs = load_pairs(bench.client_dir(name))
        assert len({p.prompt for p in pairs}) == 1, "option order and question are fixed"
        for pair in pairs:
            assert pair.chosen != pair.rejected
            assert pair.chosen in pair.prompt and pair.rejected in pair.prompt
            assert 2 <= len(pair.chosen.split()) <= 3 and len(pair.prompt.split()) <= 25
        assert len({p.chosen for p in pairs}) == 4, "every answer occurs"


def test_held_out_categories_reach_no_client(bench: SynthManifest) -> None:
    client_pairs = [
        p
        for c in DEFAULT_CLIENTS
        for s in ("train", "eval")
        for p in load_pairs(bench.client_dir(c, s))
    ]
    client_prompts = {p.prompt for p in client_pairs}
    for category in HELDOUT_CATEGORIES:
        assert not {p.prompt for p in load_pairs(bench.heldout_dir(category))} & client_prompts
    assert not {q.category for q in load_queries(bench.policy_dir("train"))} & set(
        HELDOUT_CATEGORIES
    )


@pytest.mark.parametrize("name", ["diagram", "chart"])
def test_tallest_bar_matches_pixels(name: str) -> None:
    columns, baseline, _ = bar_layout(84)
    for item in _items(name):
        heights = [
            int(_mask(item, color)[:baseline, (a + b) // 2].sum())
            for (a, b), color in zip(columns, BAR_COLORS, strict=True)
        ]
        assert int(np.argmax(heights)) == _answer_index(item)
        assert sorted(heights)[-1] - sorted(heights)[-2] >= 0.2 * 84 * 0.8 - 2


@pytest.mark.parametrize(("variant", "source"), [("chart", "diagram"), ("sign", "poster"),
                                                 ("relation", "position")])
def test_variants_ask_their_source_task_in_other_words(variant: str, source: str) -> None:
    assert variant in HELDOUT_CATEGORIES and source in DEFAULT_CLIENTS
    new, old = _items(variant, 1)[0], _items(source, 1)[0]
    assert new.options == old.options
    assert new.prompt.split(" Options:")[0] != old.prompt.split(" Options:")[0]


def test_color_matches_pixels() -> None:
    for item in _items("color"):
        counts = [_mask(item, c).sum() for c in ("red", "green", "blue", "yellow")]
        assert int(np.argmax(counts)) == _answer_index(item) and max(counts) > 100


def _dominant(item: Item, channel: int, margin: int) -> np.ndarray:
    # Position scenes are lit (their colours shift across the picture): find shapes by hue.
    pixels = np.asarray(item.image, dtype=np.int32)
    others = np.delete(pixels, channel, axis=2)
    return (pixels[..., channel] - others.max(axis=2)) > margin  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["position", "relation"])
def test_position_matches_centroids(name: str) -> None:
    for item in _items(name):
        red, blue = _dominant(item, 0, 120), _dominant(item, 2, 50)
        assert red.sum() > 80 and blue.sum() > 80
        (ry, rx), (by, bx) = (np.argwhere(m).mean(axis=0) for m in (red, blue))
        dx, dy = rx - bx, ry - by
        expected = (0 if dx < 0 else 1) if abs(dx) > abs(dy) else (2 if dy < 0 else 3)
        assert expected == _answer_index(item)
        assert max(abs(dx), abs(dy)) > 2 * min(abs(dx), abs(dy)), "one clear axis"


def _components(mask: np.ndarray) -> int:
    seen = np.zeros_like(mask)
    count = 0
    for start in map(tuple, np.argwhere(mask)):
        if seen[start]:
            continue
        count += 1
        queue = deque([start])
        seen[start] = True
        while queue:
            y, x = queue.popleft()
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if (
                    0 <= ny < mask.shape[0]
                    and 0 <= nx < mask.shape[1]
                    and mask[ny, nx]
                    and not seen[ny, nx]
                ):
                    seen[ny, nx] = True
                    queue.append((ny, nx))
    return count


def test_dot_count_matches_connected_components() -> None:
    for item in _items("count", 30):
        assert _components(_mask(item, "black", 100)) == _answer_index(item) + 1


@pytest.mark.parametrize("name", ["poster", "sign", "text"])
def test_written_word_depends_only_on_the_answer(name: str) -> None:
    """The text sits at a fixed place: its ink pattern identifies the answer exactly."""
    patterns: dict[int, set[bytes]] = {}
    for item in _items(name, 80):
        pixels = np.asarray(item.image.convert("L"))[30:54, 8:76]  # the central text band
        ink = (pixels < 110).tobytes()
        patterns.setdefault(_answer_index(item), set()).add(ink)
    assert sorted(patterns) == [0, 1, 2, 3]
    assert all(len(p) == 1 for p in patterns.values())
    assert len(set().union(*patterns.values())) == 4


def test_table_value_is_one_of_the_cells() -> None:
    for item in _items("table", 20):
        assert item.chosen in item.options and "row" in item.prompt and "column" in item.prompt


def test_kinds_and_query_options() -> None:
    for name in MULTIPLE_CHOICE_CATEGORIES:
        assert get_category(name).kind is CategoryKind.MULTIPLE_CHOICE
        item = _items(name, 1)[0]
        assert item.options[0].startswith("A. ") and len(item.rejected_choices) == 3
