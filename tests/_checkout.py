"""What a test gives a subprocess that runs this checkout's code (``python -m sdk.cli``,
``lint-imports``): the repository root and ``examples/`` (``fedmor_local``'s folder) first on
``PYTHONPATH``, so the checkout under test is imported whether or not it is installed."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout_pythonpath() -> str:
    """This checkout's packages first, then whatever the caller's ``PYTHONPATH`` held."""
    return os.pathsep.join(p for p in (str(ROOT), str(ROOT / "examples"),
                                       os.environ.get("PYTHONPATH", "")) if p)


def checkout_env(*, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """``os.environ`` less ``drop``, with :func:`checkout_pythonpath` and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"PYTHONPATH": checkout_pythonpath()} | extra
