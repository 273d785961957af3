"""The synthetic heterogeneous VQA preference benchmark: configuration, layout and writer.

Deterministic by seed: every (split, category) draws from its own ``random.Random`` seeded by a
string, so the same seed writes byte-identical files and no split ever reuses another's samples.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from sdk.data._catalog import (
    ALL_CATEGORIES,
    DEFAULT_CLIENTS,
    HELDOUT_CATEGORIES,
    get_category,
)
from sdk.data._category import CategoryKind, Item
from sdk.data._loading import PAIRS_FILE, QUERIES_FILE

__all__ = ["MANIFEST_FILE", "SynthConfig", "SynthManifest", "synthesize"]

MANIFEST_FILE = "manifest.json"
_GENERATED = ("clients", "heldout", "policy", MANIFEST_FILE)
Progress = Callable[[str], None]


class SynthConfig(BaseModel):
    """What to generate. Counts are per client (pairs) or per category (queries)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    image_size: int = Field(default=84, ge=32, le=1024)
    clients: tuple[str, ...] = DEFAULT_CLIENTS
    heldout: tuple[str, ...] = HELDOUT_CATEGORIES
    train_pairs: int = Field(default=2000, ge=1)
    eval_pairs: int = Field(default=200, ge=1)
    client_train_pairs: dict[str, int] = Field(default_factory=dict)
    """Per-client overrides of ``train_pairs`` (non-IID dataset sizes)."""
    heldout_pairs: int = Field(default=200, ge=1)
    warmup_queries: int = Field(default=200, ge=0)
    policy_train_queries: int = Field(default=64, ge=0)
    policy_eval_queries: int = Field(default=50, ge=0)

    @model_validator(mode="after")
    def _check_names(self) -> SynthConfig:
        for name in (*self.clients, *self.heldout, *self.client_train_pairs):
            if name not in ALL_CATEGORIES:
                raise ValueError(f"unknown category {name!r}; known: {', '.join(ALL_CATEGORIES)}")
        if not self.clients:
            raise ValueError("at least one client is needed")
        for label, names in (("clients", self.clients), ("heldout", self.heldout)):
            if len(set(names)) != len(names):
                raise ValueError(f"{label} repeats a name: {list(names)}")
        shared = set(self.clients) & set(self.heldout)
        if shared:
            raise ValueError(f"held-out categories given to clients: {sorted(shared)}")
        stray = set(self.client_train_pairs) - set(self.clients)
        if stray:
            raise ValueError(f"client_train_pairs names non-clients: {sorted(stray)}")
        if any(n < 1 for n in self.client_train_pairs.values()):
            raise ValueError("client_train_pairs must be >= 1")
        return self

    def train_pairs_for(self, client: str) -> int:
        """The number of training pairs of ``client``."""
        return self.client_train_pairs.get(client, self.train_pairs)


class SynthManifest(BaseModel):
    """``manifest.json``: what was generated, with record counts and SHA-256 of every file."""

    model_config = ConfigDict(extra="forbid")

    config: SynthConfig
    seed: int
    clients: tuple[str, ...]
    heldout: tuple[str, ...]
    categories: dict[str, CategoryKind]
    counts: dict[str, int]
    """Records per split directory (relative path -> count)."""
    files: dict[str, str]
    """SHA-256 of every JSONL file (relative path -> hex digest)."""
    images: dict[str, str]
    """Per split directory, SHA-256 over its image names and bytes in record order."""
    _root: Path | None = PrivateAttr(default=None)

    @property
    def root(self) -> Path:
        """The benchmark directory this manifest describes."""
        if self._root is None:
            raise ValueError("manifest is not bound to a directory; use SynthManifest.load")
        return self._root

    @classmethod
    def load(cls, root: Path | str) -> SynthManifest:
        """Read ``root/manifest.json``."""
        manifest = cls.model_validate_json((Path(root) / MANIFEST_FILE).read_text())
        manifest._root = Path(root)
        return manifest

    def client_dir(self, client: str, split: str = "train") -> Path:
        """``clients/<client>/<split>`` (``split``: ``train`` or ``eval``)."""
        if client not in self.clients or split not in ("train", "eval"):
            raise KeyError(f"no client split {client!r}/{split!r}; clients: {list(self.clients)}")
        return self.root / "clients" / client / split

    def heldout_dir(self, category: str) -> Path:
        """``heldout/<category>``: preference pairs of a category no client has."""
        if category not in self.heldout:
            raise KeyError(f"{category!r} is not held out; held out: {list(self.heldout)}")
        return self.root / "heldout" / category

    def policy_dir(self, split: str, category: str | None = None) -> Path:
        """``policy/warmup``, ``policy/train`` or ``policy/eval/<category>``."""
        if split == "eval" and category in self.categories:
            return self.root / "policy" / "eval" / category
        if split in ("warmup", "train") and category is None:
            return self.root / "policy" / split
        raise KeyError(f"no policy split {split!r} (category {category!r})")


def _rng(config: SynthConfig, stream: str, category: str) -> random.Random:
    # String seeds go through SHA-512 in CPython: stable across runs and PYTHONHASHSEED.
    return random.Random(f"fedmor-synth/{config.seed}/{stream}/{category}")


class _Writer:
    """Writes split directories (``images/`` + one JSONL file) and collects counts and hashes."""

    def __init__(self, config: SynthConfig, root: Path, progress: Progress) -> None:
        self.config = config
        self.root = root
        self.say = progress
        self.counts: dict[str, int] = {}
        self.files: dict[str, str] = {}
        self.images: dict[str, str] = {}

    def _items(self, stream: str, category: str, count: int) -> Iterator[tuple[str, Item]]:
        """``count`` times ``(record_id, item)`` from the (stream, category) RNG."""
        rng = _rng(self.config, stream, category)
        task = get_category(category)
        for index in range(count):
            yield f"{category}-{stream}-{index:05d}", task.draw(rng, self.config.image_size)

    def pairs(self, relative: str, stream: str, category: str, count: int) -> None:
        """Write ``count`` preference pairs of ``category`` to ``relative/pairs.jsonl``."""
        pick = _rng(self.config, f"{stream}/rejected", category)
        records = []
        for record_id, item in self._items(stream, category, count):
            rejected = pick.choice(item.rejected_choices)
            fields = {"prompt": item.prompt, "chosen": item.chosen, "rejected": rejected}
            records.append((record_id, item, {**fields, "category": category}))
        self._write(relative, PAIRS_FILE, records)
        self.say(f"{relative}: {count} pairs")

    def queries(
        self, relative: str, stream: str, categories: tuple[str, ...], count: int, *, answers: bool
    ) -> None:
        """Write ``count`` queries per category to ``relative/queries.jsonl``."""
        records = []
        for category in categories:
            for record_id, item in self._items(stream, category, count):
                fields = {"prompt": item.prompt, "category": category}
                answer = item.chosen if answers else None
                records.append(
                    (record_id, item, {**fields, "answer": answer, "options": list(item.options)})
                )
        self._write(relative, QUERIES_FILE, records)

    def _write(
        self, relative: str, filename: str, records: list[tuple[str, Item, dict[str, Any]]]
    ) -> None:
        directory = self.root / relative
        (directory / "images").mkdir(parents=True, exist_ok=True)
        image_hash = hashlib.sha256()
        lines = []
        for record_id, item, fields in records:
            image_path = f"images/{record_id}.png"
            item.image.save(directory / image_path, format="PNG")
            image_hash.update(image_path.encode() + b"\0")
            image_hash.update((directory / image_path).read_bytes())
            lines.append(json.dumps({"id": record_id, "image": image_path, **fields}) + "\n")
        data = "".join(lines).encode("utf-8")
        (directory / filename).write_bytes(data)
        self.files[f"{relative}/{filename}"] = hashlib.sha256(data).hexdigest()
        self.images[relative] = image_hash.hexdigest()
        self.counts[relative] = len(records)


def _prepare(out_dir: Path) -> None:
    """Clear a previous benchmark in ``out_dir``; refuse to mix with unrelated files."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ValueError(f"output path {out_dir} exists and is not a directory")
        unrelated = sorted(p.name for p in out_dir.iterdir() if p.name not in _GENERATED)
        if unrelated:
            raise ValueError(f"output directory {out_dir} holds unrelated files: {unrelated[:5]}")
        for name in _GENERATED:
            target = out_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def synthesize(
    config: SynthConfig, out_dir: Path | str, *, progress: Progress | None = None
) -> SynthManifest:
    """Write the benchmark to ``out_dir`` (see ``docs/data.md`` for the layout)."""
    root = Path(out_dir)
    _prepare(root)
    writer = _Writer(config, root, progress or (lambda _message: None))
    for client in config.clients:
        writer.pairs(f"clients/{client}/train", "train", client, config.train_pairs_for(client))
        writer.pairs(f"clients/{client}/eval", "eval", client, config.eval_pairs)
    for category in config.heldout:
        writer.pairs(f"heldout/{category}", "heldout", category, config.heldout_pairs)
    every = config.clients + config.heldout
    multiple_choice = tuple(
        c for c in every if get_category(c).kind is CategoryKind.MULTIPLE_CHOICE
    )
    writer.queries("policy/warmup", "warmup", multiple_choice, config.warmup_queries, answers=True)
    writer.say(f"policy/warmup: {writer.counts['policy/warmup']} queries")
    # The GRPO query set carries no answers: nothing about preferences reaches the server.
    writer.queries(
        "policy/train", "policy", config.clients, config.policy_train_queries, answers=False
    )
    writer.say(f"policy/train: {writer.counts['policy/train']} queries")
    for category in every:
        writer.queries(
            f"policy/eval/{category}",
            "peval",
            (category,),
            config.policy_eval_queries,
            answers=True,
        )
    writer.say(f"policy/eval: {config.policy_eval_queries} queries x {len(every)} categories")
    manifest = SynthManifest(
        config=config,
        seed=config.seed,
        clients=config.clients,
        heldout=config.heldout,
        categories={c: get_category(c).kind for c in every},
        counts=writer.counts,
        files=writer.files,
        images=writer.images,
    )
    (root / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    manifest._root = root
    return manifest
