"""Tiny VLM checkpoints of every architecture, built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdk.models import ARCHITECTURES, build_tiny_vlm


@pytest.fixture(scope="session")
def vlm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vlms")
    return {
        arch: build_tiny_vlm(arch, root / arch, corpus=["the red square", "a blue circle"])
        for arch in ARCHITECTURES
    }
