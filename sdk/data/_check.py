"""Leaks between splits: the same image (by content hash) under a train and an eval folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sdk.data._loading import PAIRS_FILE, QUERIES_FILE

__all__ = ["shared_images", "split_role"]


def split_role(directory: Path, root: Path) -> str | None:
    """``train`` or ``eval`` when a folder of ``directory``'s path below ``root`` is so named."""
    parts = directory.relative_to(root).parts if directory != root else ()
    for role in ("eval", "train"):
        if role in parts:
            return role
    return None


def _image_hashes(directory: Path) -> dict[str, str]:
    """Content hash -> image path of every image a JSONL file in ``directory`` names."""
    found: dict[str, str] = {}
    read: set[Path] = set()
    for name in (PAIRS_FILE, QUERIES_FILE):
        path = directory / name
        if not path.is_file():
            continue
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line) if line.strip() else {}
                image = directory / str(record.get("image", ""))
                if image.is_file() and image not in read:
                    read.add(image)
                    found.setdefault(hashlib.sha256(image.read_bytes()).hexdigest(), str(image))
    return found


def shared_images(root: Path) -> list[tuple[str, str]]:
    """``(train_image, eval_image)`` for each image content found under both a train and an eval
    folder below ``root`` (the folders' files must be valid: check them first)."""
    by_role: dict[str, dict[str, str]] = {"train": {}, "eval": {}}
    directories = {p.parent for p in [*root.rglob(PAIRS_FILE), *root.rglob(QUERIES_FILE)]}
    for directory in sorted(directories):
        role = split_role(directory, root)
        if role is not None:
            for digest, image in _image_hashes(directory).items():
                by_role[role].setdefault(digest, image)
    train, evals = by_role["train"], by_role["eval"]
    return [(train[d], evals[d]) for d in sorted(set(train) & set(evals))]
