"""The arrows between packages: import-linter's contracts (pyproject.toml) hold, so a back-edge
(sdk importing an app, one app importing the other, the wire contract importing a web framework
or a database) fails the default test run."""

from __future__ import annotations

import ast
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
    assert len(declared["contracts"]) == 6
    for contract in declared["contracts"]:
        assert f"{contract['name']} KEPT" in out.stdout


def _private_sdk_imports(path: Path) -> list[str]:
    """``file:line module`` for each import of a private ``sdk`` module in ``path`` (a name
    starting with ``_`` anywhere below ``sdk``: ``sdk._x``, ``sdk.pkg._x``, ``from sdk import
    _x``; dunders such as ``__version__`` are public)."""
    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] == "sdk" and any(p.startswith("_") and not p.startswith("__")
                                         for p in parts[1:])

    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = ([node.module] if private(node.module)
                       else [f"{node.module}.{alias.name}" for alias in node.names])
        found += [f"{path.name}:{node.lineno} {m}" for m in modules if private(m)]
    return found


def test_no_package_above_sdk_imports_a_private_sdk_module() -> None:
    """import-linter's wildcards match whole module names only, so ``sdk._*`` is checked here:
    the apps, attacks, the demo harness and the benchmarks use sdk's public names (tests may
    reach into private modules)."""
    checked = [path for top in ("server_app", "client_app", "attacks", "examples")
               for path in sorted((ROOT / top).rglob("*.py"))]
    assert len(checked) > 50  # the folders were found
    offending = [f"{path.parent.name}/{hit}" for path in checked
                 for hit in _private_sdk_imports(path)]
    assert not offending, offending


def test_the_private_import_check_sees_every_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import sdk._progress\nfrom sdk.reward._dp import PairDPSGD\n"
                      "from sdk import _version, __version__\n"
                      "from sdk.reward import DEFAULT_CLIP\nfrom . import _local\n"
                      "import sdk.progress\n")
    assert _private_sdk_imports(sample) == ["sample.py:1 sdk._progress",
                                            "sample.py:2 sdk.reward._dp",
                                            "sample.py:3 sdk._version"]
