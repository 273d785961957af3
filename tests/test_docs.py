"""The documentation site builds with ``mkdocs --strict`` and documents every public name."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sdk.data", "sdk.models", "sdk.reward", "sdk.router", "sdk.secagg", "sdk.alignment",
            "sdk.wire", "sdk.storage", "sdk.serving", "sdk.membership", "sdk.ops", "sdk.capture",
            "sdk.progress", "sdk.runtime_options", "sdk.curves",
            "server_app", "client_app", "attacks", "fedmor_local", "sdk.rounds")

griffe = pytest.importorskip("griffe", reason="the docs extra (mkdocstrings) is not installed")


def _mkdocs() -> list[str]:
    exe = Path(sys.executable).with_name("mkdocs")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("mkdocs")
    if found is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    return [found]


def test_site_builds_strict(tmp_path: Path) -> None:
    """No broken link, missing anchor, unlisted page or docstring warning: all fail --strict."""
    proc = subprocess.run([*_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    for package in PACKAGES:  # every exported name has its own anchor on its API page
        page = (tmp_path / "site" / "api" / package / "index.html").read_text()
        module = __import__(package, fromlist=["__all__"])
        missing = [name for name in module.__all__ if f'id="{package}.{name}"' not in page]
        assert not missing, f"{package}: not on its API page: {missing}"
    assert not (tmp_path / "site" / "lab-notes").exists()  # the history is not published


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_a_docstring(package: str) -> None:
    module = griffe.load(package, search_paths=[str(ROOT)], resolve_aliases=True,
                         resolve_external=True)  # a package may re-export another's names
    undocumented = [name for name in module.exports
                    if not (module[name].docstring and module[name].docstring.value.strip())]
    assert not undocumented, f"{package}.__all__ names without a docstring: {undocumented}"
