"""PEP 562 re-exports imported on first use, so a command that needs one light name of a
package does not load the package's heavy modules (torch, transformers, fastapi).

A package lists its deferred names once, as ``from <module> import <name>`` lines in a top-level
``if TYPE_CHECKING:`` block (what mypy and readers see), and ends with::

    if not TYPE_CHECKING:  # mypy reads the block above; a typo in a name stays an error
        __getattr__, __dir__ = lazy_exports(__name__)

The block is read from the package's source on first access, so the names and their modules are
written in one place.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _deferred(init_file: str) -> dict[str, tuple[str, str]]:
    """exported name -> (module, name in it), from the file's top-level ``if TYPE_CHECKING:``."""
    import ast  # only on a package's first deferred name: ``import sdk`` stays light

    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), filename=init_file)
    table: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                for alias in stmt.names:
                    table[alias.asname or alias.name] = (stmt.module, alias.name)
    return table


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: a name of its ``__all__`` that
    its ``TYPE_CHECKING`` block imports is imported on first access, then kept on the package."""
    module = sys.modules[package]
    table: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> Any:
        if not table and module.__file__ is not None:
            table.update(_deferred(module.__file__))
        if name not in table or name not in module.__all__:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        source, attr = table[name]
        value = getattr(importlib.import_module(source), attr)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(module.__all__))

    return __getattr__, __dir__
