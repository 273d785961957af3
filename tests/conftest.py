"""Suite-wide settings: no test reads or writes the user's own fedmor profiles."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_config_dir() -> object:
    """``$FEDMOR_CONFIG_DIR`` points at a folder of the suite's own (subprocesses inherit it), so
    a developer's ``fedmor enroll`` profiles never pick a test's server."""
    with tempfile.TemporaryDirectory(prefix="fedmor-config-") as folder:
        old = os.environ.get("FEDMOR_CONFIG_DIR")
        os.environ["FEDMOR_CONFIG_DIR"] = folder
        yield folder
        if old is None:
            os.environ.pop("FEDMOR_CONFIG_DIR", None)
        else:
            os.environ["FEDMOR_CONFIG_DIR"] = old
