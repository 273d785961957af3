"""The capture directory, read for an attack (``fedmor audit --capture DIR``).

The format (manifest models, file layout, :func:`write_capture`) lives in ``sdk.capture``, so
that the server writes it without importing ``attacks``; it is documented in docs/attacks.md.
This module re-exports it and adds :class:`CaptureDir`, whose updates load as torch
:class:`~attacks._captured.CapturedRouterUpdate` s and whose errors are ``AttackInputError`` s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attacks._captured import CapturedRouterUpdate
from attacks._errors import AttackInputError
from sdk.capture import (
    CAPTURE_DIR_FORMAT,
    CapturedArtefact,
    CapturedRound,
    CaptureError,
    CaptureFiles,
    CaptureManifest,
    RewardQuery,
    RoundCapture,
    write_capture,
)

__all__ = [
    "CAPTURE_DIR_FORMAT",
    "CaptureDir",
    "CaptureError",
    "CaptureManifest",
    "CapturedArtefact",
    "CapturedRound",
    "RewardQuery",
    "RoundCapture",
    "write_capture",
]


@contextmanager
def _as_attack_input() -> Iterator[None]:
    try:
        yield
    except CaptureError as exc:
        raise AttackInputError(str(exc)) from exc


@dataclass(frozen=True)
class CaptureDir(CaptureFiles):
    """A capture directory opened for an attack; every file was checked against the
    manifest."""

    @classmethod
    def open(cls, root: str | Path, *, verify: bool = True) -> CaptureDir:
        """Read and check ``root/manifest.json`` (and, with ``verify``, every file's sha256);
        an ``AttackInputError`` for anything else."""
        with _as_attack_input():
            opened = super().open(root, verify=verify)
        assert isinstance(opened, CaptureDir)
        return opened

    def update(self, art: CapturedArtefact) -> CapturedRouterUpdate:
        """A plain update or an aggregate, as a ``fedmor-captured-update-v1`` file."""
        return CapturedRouterUpdate.load(self.root / art.file)

    def masked(self, art: CapturedArtefact) -> np.ndarray:
        """A masked input, (P+1,) uint32."""
        with _as_attack_input():
            return super().masked(art)
