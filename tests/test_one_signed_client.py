"""One module in the tree builds signed requests: every caller goes through
``sdk.wire.SignedClient`` / ``AsyncSignedClient``, so the signing rules live in one place."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("sdk", "server_app", "client_app", "attacks", "examples")


def _signs(tree: ast.AST) -> bool:
    """Whether ``tree`` calls ``sign_headers`` (by name or as an attribute)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name == "sign_headers":
                return True
    return False


def test_only_the_signed_client_builds_signed_requests() -> None:
    signing = sorted(
        path.relative_to(ROOT).as_posix()
        for folder in SOURCES for path in (ROOT / folder).rglob("*.py")
        if _signs(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))
    assert signing == ["sdk/wire/_client.py"]


def test_the_local_consortium_operator_has_one_client(tmp_path: Path) -> None:
    from fedmor_local import LocalConsortium

    # The raw side (tests' ``admin.get``) and the typed side share one client and its timeout.
    with LocalConsortium(tmp_path, 0) as c:
        assert c.admin is c.ops.http
        assert c.admin.headers["authorization"].startswith("Bearer ")
        assert c.admin.timeout.read == 120
