"""The synthetic benchmark: layout, counts, manifest, determinism and configuration errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from _datakit import SMALL
from pydantic import ValidationError

from sdk.data import (
    HELDOUT_CATEGORIES,
    MULTIPLE_CHOICE_CATEGORIES,
    SynthConfig,
    SynthManifest,
    load_pairs,
    load_queries,
    synthesize,
)
from sdk.data._catalog import ALL_CATEGORIES, CATEGORIES, DEFAULT_CLIENTS
from sdk.data._category import CategoryKind


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_layout_and_counts(bench: SynthManifest) -> None:
    assert bench.clients == DEFAULT_CLIENTS and bench.heldout == HELDOUT_CATEGORIES
    for client in DEFAULT_CLIENTS:
        train = load_pairs(bench.client_dir(client, "train"))
        assert (
            len(train)
            == (25 if client == "safety" else 40)
            == bench.counts[f"clients/{client}/train"]
        )
        assert len(load_pairs(bench.client_dir(client, "eval"))) == 12
        assert {p.category for p in train} == {client}
    for category in HELDOUT_CATEGORIES:
        pairs = load_pairs(bench.heldout_dir(category))
        assert len(pairs) == 10 and {p.category for p in pairs} == {category}
    assert len(load_queries(bench.policy_dir("warmup"))) == 8 * len(MULTIPLE_CHOICE_CATEGORIES)
    assert len(load_queries(bench.policy_dir("train"))) == 6 * len(DEFAULT_CLIENTS)
    for category in ALL_CATEGORIES:
        assert len(load_queries(bench.policy_dir("eval", category))) == 5
    assert all(p.image.size == (84, 84) for p in load_pairs(bench.client_dir("diagram")))


def test_manifest_round_trips_and_hashes_match(bench: SynthManifest) -> None:
    loaded = SynthManifest.load(bench.root)
    assert loaded.model_dump() == bench.model_dump()
    assert loaded.config == SMALL and loaded.seed == 3
    assert loaded.categories["detail"] is CategoryKind.OPEN
    assert loaded.categories["table"] is CategoryKind.MULTIPLE_CHOICE
    assert set(loaded.files) == {
        f"{d}/{'pairs' if d.startswith(('clients', 'heldout')) else 'queries'}.jsonl"
        for d in loaded.counts
    }
    for relative, digest in loaded.files.items():
        assert hashlib.sha256((bench.root / relative).read_bytes()).hexdigest() == digest
    image_hash = hashlib.sha256()
    for record in _jsonl(bench.root / "clients/poster/eval/pairs.jsonl"):
        name = str(record["image"])
        image_hash.update(name.encode() + b"\0")
        image_hash.update((bench.root / "clients/poster/eval" / name).read_bytes())
    assert loaded.images["clients/poster/eval"] == image_hash.hexdigest()
    with pytest.raises(KeyError, match="color"):
        loaded.client_dir("color")
    with pytest.raises(KeyError):
        loaded.heldout_dir("diagram")


def test_same_seed_is_byte_identical_and_other_seed_differs(
    bench: SynthManifest, tmp_path: Path
) -> None:
    again = synthesize(SMALL, tmp_path / "again")
    assert again.files == bench.files and again.images == bench.images
    for relative in bench.files:
        assert (tmp_path / "again" / relative).read_bytes() == (bench.root / relative).read_bytes()
    other = synthesize(SMALL.model_copy(update={"seed": 4}), tmp_path / "other")
    assert all(other.files[r] != bench.files[r] for r in bench.files)
    # Each split has its own stream: changing one count leaves every other file unchanged.
    bigger = synthesize(SMALL.model_copy(update={"eval_pairs": 13}), tmp_path / "bigger")
    changed = {r for r in bench.files if bigger.files[r] != bench.files[r]}
    assert changed == {f"clients/{c}/eval/pairs.jsonl" for c in bench.clients}
    head = (tmp_path / "bigger/clients/detail/eval/pairs.jsonl").read_text().splitlines()
    assert head[:12] == (bench.root / "clients/detail/eval/pairs.jsonl").read_text().splitlines()


def test_splits_draw_fresh_samples(bench: SynthManifest) -> None:
    def image_hashes(directory: Path, category: str) -> set[str]:
        records = _jsonl(next(directory.glob("*.jsonl")))
        return {
            hashlib.sha256((directory / str(r["image"])).read_bytes()).hexdigest()
            for r in records
            if r["category"] == category
        }

    for client in ("diagram", "position", "detail"):
        train = image_hashes(bench.client_dir(client, "train"), client)
        assert not train & image_hashes(bench.client_dir(client, "eval"), client)
        assert not train & image_hashes(bench.policy_dir("train"), client)
        assert not train & image_hashes(bench.policy_dir("eval", client), client)
        if client != "detail":
            assert not train & image_hashes(bench.policy_dir("warmup"), client)


def test_policy_splits(bench: SynthManifest) -> None:
    warmup = load_queries(bench.policy_dir("warmup"))
    assert {q.category for q in warmup} == set(MULTIPLE_CHOICE_CATEGORIES)
    assert all(q.answer in q.options and len(q.options) == 4 for q in warmup)
    train = load_queries(bench.policy_dir("train"))
    assert {q.category for q in train} == set(DEFAULT_CLIENTS)
    assert all(q.answer is None for q in train)
    for category in ALL_CATEGORIES:
        queries = load_queries(bench.policy_dir("eval", category))
        assert all(q.answer for q in queries)
        assert all(bool(q.options) == (category in MULTIPLE_CHOICE_CATEGORIES) for q in queries)


def test_rerun_replaces_and_refuses_unrelated_directories(tmp_path: Path) -> None:
    config = SynthConfig(
        clients=("color",),
        heldout=(),
        train_pairs=3,
        eval_pairs=2,
        warmup_queries=1,
        policy_train_queries=1,
        policy_eval_queries=1,
    )
    first = synthesize(config, tmp_path / "b")
    second = synthesize(config.model_copy(update={"clients": ("count",)}), tmp_path / "b")
    assert not (tmp_path / "b/clients/color").exists() and second.files != first.files
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="unrelated files"):
        synthesize(config, tmp_path / "mine")
    assert (tmp_path / "mine/notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"clients": ("diagram", "graph")}, "unknown category 'graph'"),
        ({"clients": ("diagram", "color")}, "held-out categories given to clients"),
        ({"clients": ("diagram", "diagram")}, "clients repeats a name"),
        ({"client_train_pairs": {"poster": 5}, "clients": ("diagram",)}, "names non-clients"),
        ({"clients": ()}, "at least one client"),
        ({"image_size": 8}, "image_size"),
        ({"train_pairs": 0}, "train_pairs"),
    ],
)
def test_config_errors(fields: dict[str, object], reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        SynthConfig.model_validate(fields)


def test_registry_matches_constants() -> None:
    assert tuple(CATEGORIES) == ALL_CATEGORIES
    for name, category in CATEGORIES.items():
        assert category.name == name
        expected = (
            CategoryKind.MULTIPLE_CHOICE
            if name in MULTIPLE_CHOICE_CATEGORIES
            else CategoryKind.OPEN
        )
        assert category.kind is expected
