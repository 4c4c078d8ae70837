"""No import cycle among the product's modules.

Imports inside functions and inside ``if TYPE_CHECKING:`` blocks count: a lazy import or a
type-only import that hides a cycle is still a cycle (declare a Protocol on the side that uses
the other instead). The layer contracts (``lint-imports``, configured in pyproject.toml) say
which way the arrows point; this test says there is no loop at all, also inside one package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler_core", "webapp")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The product modules a module imports, at run time or for type checking only (``from x
    import y`` may name a module)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base in modules:
                found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    modules = {module_name(path): path for path in paths}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imported(ast.parse(path.read_text(encoding="utf-8")), package, set(modules)) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _is_package_init_edge(source: str, target: str) -> bool:
    """A package's ``__init__`` re-exporting its own submodules is not a cycle of behaviour."""
    return target.startswith(source + ".")


def test_no_import_cycles() -> None:
    graph = {source: {t for t in targets if not _is_package_init_edge(source, t)}
             for source, targets in import_graph().items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize(("source", "expected"), [
    ("from scheduler_core.store import rows\n", {"scheduler_core.store", "scheduler_core.store.rows"}),
    ("import typing\nif typing.TYPE_CHECKING:\n    from scheduler_core.store import rows\n",
     {"scheduler_core.store", "scheduler_core.store.rows"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .rows import one_row\n",
     {"scheduler_core.store.rows"}),
    ("def f():\n    from scheduler_core.store.rows import one_row\n", {"scheduler_core.store.rows"}),
    ("from .rows import one_row\n", {"scheduler_core.store.rows"}),
])
def test_imports_are_read_as_python_resolves_them(source: str, expected: set[str]) -> None:
    modules = {"scheduler_core.store", "scheduler_core.store.rows"}
    assert imported(ast.parse(source), "scheduler_core.store", modules) == expected
