"""No module of scheduler_core or webapp imports another module's private names.

A leading underscore means "not part of this module's surface": importing such a name (``from
x import _helper``) ties two modules to a detail neither promised. Private modules (``_config``)
are for their own package: a module outside it must not import them. Dunders are public.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler_core", "webapp")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(module: str, is_package: bool) -> list[str]:
    parts = module.split(".")
    return parts if is_package else parts[:-1]


def _absolute(node: ast.ImportFrom, package: list[str]) -> str:
    if node.level == 0:
        return node.module or ""
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _private_module_outside(imported: str, package: list[str]) -> str | None:
    """The first private part of ``imported`` whose parent package does not hold the importer."""
    parts = imported.split(".")
    for index, part in enumerate(parts):
        if _is_private(part) and package[:index] != parts[:index]:
            return ".".join(parts[: index + 1])
    return None


def violations(source: str, module: str, is_package: bool = False) -> Iterator[str]:
    """``module`` (dotted) importing a private name, or a private module from outside its package."""
    package = _package_of(module, is_package)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            origin = _absolute(node, package)
            yield from (f"{module}:{node.lineno} imports {alias.name} from {origin}"
                        for alias in node.names if _is_private(alias.name))
            if (private := _private_module_outside(origin, package)) is not None:
                yield f"{module}:{node.lineno} imports from {private}, private to its package"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (private := _private_module_outside(alias.name, package)) is not None:
                    yield f"{module}:{node.lineno} imports {private}, private to its package"


def _modules() -> Iterator[tuple[str, Path, bool]]:
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).with_suffix("")
            is_package = relative.name == "__init__"
            parts = relative.parts[:-1] if is_package else relative.parts
            yield ".".join(parts), path, is_package


def test_no_module_imports_another_modules_private_names() -> None:
    found = [problem for module, path, is_package in _modules()
             for problem in violations(path.read_text(encoding="utf-8"), module, is_package)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("source", "module", "is_package", "expected"), [
    ("from scheduler_core.executors.http import _root_cause", "scheduler_core.reach.x", False, 1),
    ("from .http import _describe", "scheduler_core.executors.code", False, 1),
    ("import scheduler_core.reach.providers._config", "scheduler_core.reach.queue", False, 1),
    ("from scheduler_core.reach.providers._http import request_json", "scheduler_core.reach.queue", False, 1),
    ("from ..providers._config import Settings", "scheduler_core.reach.other.mod", False, 1),
    ("from scheduler_core.reach.providers._config import Settings", "scheduler_core.reach.providers.sms", False, 0),
    ("from ._config import Settings", "scheduler_core.reach.providers", True, 0),
    ("from scheduler_core import __version__", "scheduler_core.cli", False, 0),
    ("from __future__ import annotations", "scheduler_core.cli", False, 0),
    ("from scheduler_core.transport import root_cause", "scheduler_core.reach.x", False, 0),
])
def test_the_check_sees_what_it_should(source: str, module: str, is_package: bool, expected: int) -> None:
    assert len(list(violations(source, module, is_package))) == expected
