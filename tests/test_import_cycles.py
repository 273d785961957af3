"""No import cycles between modules: each package reads bottom-up, a module never needs one that
needs it back. Imports inside functions and under ``TYPE_CHECKING`` count too: a deferred
import hides a cycle from the interpreter, not from a reader."""

from __future__ import annotations

import grimp

PACKAGES = ("sdk", "server_app", "client_app", "attacks", "fedmor_local")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(
                        child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def _explain(graph: grimp.ImportGraph, group: list[str]) -> str:
    lines = []
    for importer in group:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported in group:
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    lines.append(f"  {importer}:{detail['line_number']}: "
                                 f"{detail['line_contents']}")
    return " <-> ".join(group) + "\n" + "\n".join(lines)


def test_no_module_imports_one_that_imports_it_back() -> None:
    # No cache: a cached graph keyed on file times can miss an edit made within the same second.
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_explain(graph, g) for g in cycles)
