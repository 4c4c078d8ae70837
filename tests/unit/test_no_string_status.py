"""Statuses are enums end to end: no status compared with a bare string.

Every status family is a ``StrEnum`` in ``scheduler_core/statuses.py``. A member compares equal to
its string, so ``x.status == "success"`` works, and that is why it slips in: this test walks the
source of ``scheduler_core/`` and ``webapp/`` and names every comparison (``==``, ``!=``, ``in``,
``not in`` a literal tuple, set or list, or SQLAlchemy's ``.in_(...)``) of a name or attribute
ending in ``status`` with a string literal that is one of those enums' values. Migrations are left
out: their SQL is history.
"""

from __future__ import annotations

import ast
from enum import StrEnum
from pathlib import Path

import pytest

from scheduler_core import statuses

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler_core", "webapp")
EXCLUDED = ("scheduler_core/db/migrations/",)
VALUES = frozenset(
    member.value
    for enum in vars(statuses).values()
    if isinstance(enum, type) and issubclass(enum, StrEnum) and enum.__module__ == statuses.__name__
    for member in enum
)
IN_CALLS = frozenset({"in_", "not_in", "notin_"})


def _is_status(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("status")


def _status_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VALUES


def _has_status_literal(node: ast.expr) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_status_literal(e) for e in node.elts)


def _offends(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands[:-1], operands[1:], strict=True):
            if isinstance(op, (ast.Eq, ast.NotEq)) and (
                    (_is_status(left) and _status_literal(right)) or (_is_status(right) and _status_literal(left))):
                return True
            if isinstance(op, (ast.In, ast.NotIn)) and _is_status(left) and _has_status_literal(right):
                return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_CALLS:
        return _is_status(node.func.value) and any(
            _status_literal(a) or _has_status_literal(a) for a in node.args)
    return False


def _offenders() -> list[str]:
    found: list[tuple[str, int, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(EXCLUDED):
                continue
            tree = ast.parse(path.read_text(), filename=relative)
            found += [(relative, node.lineno, ast.unparse(node)) for node in ast.walk(tree) if _offends(node)]
    return [f"{path}:{line}: {source}" for path, line, source in sorted(found)]


def test_the_status_values_are_known() -> None:
    assert {"success", "unknown", "pending", "dead", "queued"} <= VALUES


@pytest.mark.parametrize(("source", "offends"), [
    ('outcome.status == "success"', True),
    ('"dead" != entry.status', True),
    ('status in ("sent", "discarded")', True),
    ('table.c.status.in_(["pending"])', True),
    ('a < b.status == "unknown"', True),
    ("outcome.status == AttemptStatus.SUCCESS", False),
    ('response.status == "ok"', False),  # not a status family's value
    ('kind == "success"', False),  # not a status
    ("status in FAILURE_STATUSES", False),
])
def test_the_walk_sees_a_string_status(source: str, offends: bool) -> None:
    assert any(_offends(node) for node in ast.walk(ast.parse(source))) is offends


def test_no_status_is_compared_with_a_string() -> None:
    offenders = _offenders()
    assert not offenders, "statuses compared with string literals (use the enums of scheduler_core.statuses):\n" + \
        "\n".join(offenders)
