"""The arrows between packages: import-linter's contracts (pyproject.toml) hold, so a back-edge
(sdk importing an app, one app importing the other) fails the default test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

from tests._checkout import checkout_env

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    env = checkout_env()
    out = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout
    # Every contract pyproject.toml declares was checked, not an empty configuration.
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert len(declared["contracts"]) == 3
    for contract in declared["contracts"]:
        assert f"{contract['name']} KEPT" in out.stdout
