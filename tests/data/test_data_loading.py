"""load_pairs / load_queries: valid data loads, every kind of bad record names file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _datakit import WriteDir, pair_record
from PIL import Image

from sdk.data import PreferenceDataError, PreferencePair, load_pairs, load_queries


def test_valid_pairs_load_in_order_as_rgb(write_dir: WriteDir) -> None:
    directory = write_dir([pair_record(0), pair_record(1, chosen="C. blue")])
    Image.new("L", (16, 16), 7).save(directory / "images/1.png")  # greyscale on disk
    pairs = load_pairs(directory)
    assert [p.id for p in pairs] == ["p0", "p1"]
    assert isinstance(pairs[0], PreferencePair)
    assert pairs[1].chosen == "C. blue" and pairs[1].rejected == "B. green"
    assert all(p.image.mode == "RGB" and p.image.size == (16, 16) for p in pairs)
    assert pairs[1].image.getpixel((0, 0)) == (7, 7, 7)
    with pytest.raises(AttributeError):
        pairs[0].prompt = "changed"  # type: ignore[misc]


def test_blank_lines_are_skipped_but_counted(write_dir: WriteDir) -> None:
    directory = write_dir([pair_record(0), "", pair_record(2, image="images/missing.png")])
    with pytest.raises(PreferenceDataError) as info:
        load_pairs(directory)
    assert info.value.line == 3


def _expect(directory: Path, line: int | None, reason: str, **kwargs: Any) -> None:
    with pytest.raises(PreferenceDataError) as info:
        load_pairs(directory, **kwargs)
    message = str(info.value)
    where = f"{directory / 'pairs.jsonl'}:{line}" if line else str(directory / "pairs.jsonl")
    assert message.startswith(where + ":"), message
    assert reason in message, message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "not a JSON object"),
        (pair_record(1, chosen="   "), "field 'chosen' is empty"),
        (pair_record(1, prompt=""), "field 'prompt' is empty"),
        ({k: v for k, v in pair_record(1).items() if k != "rejected"}, "missing field 'rejected'"),
        (pair_record(1, category=3), "field 'category' must be a string"),
        (pair_record(1, id="p0"), "duplicate id 'p0' (first on line 1)"),
        (pair_record(1, image="images/nope.png"), "image 'images/nope.png' not found"),
        (pair_record(1, image="../outside.png"), "escapes the data directory"),
        (pair_record(1, image="/etc/hostname"), "escapes the data directory"),
    ],
)
def test_bad_record_names_file_and_line(write_dir: WriteDir, bad: Any, reason: str) -> None:
    directory = write_dir([pair_record(0), bad, pair_record(2)])
    (directory.parent / "outside.png").write_bytes(b"")  # exists, but outside the directory
    _expect(directory, 2, reason)


def test_unreadable_image(write_dir: WriteDir) -> None:
    directory = write_dir([pair_record(0), pair_record(1)])
    (directory / "images/1.png").write_bytes(b"\x89PNG not really")
    _expect(directory, 2, "image 'images/1.png' is unreadable")


def test_oversized_image_by_side_and_by_bytes(write_dir: WriteDir) -> None:
    directory = write_dir([pair_record(0), pair_record(1)])
    Image.new("RGB", (300, 20)).save(directory / "images/1.png")
    _expect(directory, 2, "is 300x20, over the limit of 256 px", max_image_side=256)
    size = (directory / "images/0.png").stat().st_size
    _expect(
        directory, 1, f"is {size} bytes, over the limit of {size - 1}", max_image_bytes=size - 1
    )
    assert len(load_pairs(directory, max_image_side=300)) == 2


def test_missing_file_directory_and_empty_file(write_dir: WriteDir, tmp_path: Path) -> None:
    with pytest.raises(PreferenceDataError, match="data directory not found"):
        load_pairs(tmp_path / "absent")
    _expect(tmp_path, None, "file not found")
    directory = write_dir([])
    _expect(directory, None, "no records")


def test_queries_with_and_without_answers(write_dir: WriteDir) -> None:
    base = {"prompt": "Which bar is tallest?", "category": "diagram"}
    records = [
        {
            "id": "q0",
            "image": "images/0.png",
            **base,
            "answer": "B. green",
            "options": ["A. red", "B. green"],
        },
        {"id": "q1", "image": "images/1.png", **base, "answer": None, "options": []},
        {"id": "q2", "image": "images/2.png", **base},
    ]
    directory = write_dir(records, filename="queries.jsonl")
    queries = load_queries(directory)
    assert queries[0].answer == "B. green" and queries[0].options == ("A. red", "B. green")
    assert queries[1].answer is None and queries[2].options == ()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"answer": "C. blue", "options": ["A. red", "B. green"]}, "is not one of the options"),
        ({"options": "A. red"}, "'options' must be a list of non-empty strings"),
        ({"answer": ""}, "field 'answer' is empty"),
    ],
)
def test_bad_query_names_file_and_line(
    write_dir: WriteDir, change: dict[str, Any], reason: str
) -> None:
    good = {"id": "q0", "image": "images/0.png", "prompt": "Say?", "category": "text"}
    directory = write_dir([good, json.dumps({**good, "id": "q1", **change})], "queries.jsonl")
    with pytest.raises(PreferenceDataError) as info:
        load_queries(directory)
    assert str(info.value).startswith(f"{directory / 'queries.jsonl'}:2:")
    assert reason in str(info.value)
