"""Shared fixtures: a small synthetic benchmark and a writer for hand-made data directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _datakit import SMALL, WriteDir
from PIL import Image

from sdk.data import SynthManifest, synthesize


@pytest.fixture(scope="session")
def bench(tmp_path_factory: pytest.TempPathFactory) -> SynthManifest:
    """A small benchmark written once per test session."""
    return synthesize(SMALL, tmp_path_factory.mktemp("bench"))


@pytest.fixture
def write_dir(tmp_path: Path) -> WriteDir:
    """Write ``pairs.jsonl`` from records (dicts, or raw strings written verbatim) plus images.

    Every record index ``i`` gets a valid 16x16 image ``images/<i>.png``.
    """

    def write(records: list[Any], filename: str = "pairs.jsonl") -> Path:
        (tmp_path / "images").mkdir(exist_ok=True)
        lines = []
        for index, record in enumerate(records):
            Image.new("RGB", (16, 16), (index * 10 % 256, 0, 0)).save(
                tmp_path / f"images/{index}.png"
            )
            lines.append(record if isinstance(record, str) else json.dumps(record))
        (tmp_path / filename).write_text("\n".join(lines) + "\n")
        return tmp_path

    return write
