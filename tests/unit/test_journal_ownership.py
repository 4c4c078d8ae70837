"""Only the journal package (``scheduler_core/store/journal/``) writes the ``executions`` table, and
inside it only its writing modules (``transitions.WRITERS``) do (docs/semantics.md J1).

A write is an INSERT, UPDATE or DELETE of the table in any spelling the product could use:
``update(executions)``, ``insert(...)`` / ``delete(...)`` from ``sqlalchemy`` or a dialect,
``executions.update()``, the store's own helpers (``insert_ignore``, ``insert_ignore_many``,
``owner_write`` and ``lock_owned`` given the table or one of its columns), and SQL text
(``UPDATE executions ...``) handed to a call. The table is followed through aliases: ``from ...
tables import executions as e``, ``tables.executions``, ``metadata.tables["executions"]``, and
names assigned from any of those. Migrations are left out: a migration runs against the schema
of its version and must not call the product's code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_core.store.journal.transitions import WRITERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "scheduler_core"
JOURNAL = PACKAGE / "store" / "journal"
EXEMPT = (PACKAGE / "db" / "migrations",)
TABLE = "executions"
TABLES_MODULE = "scheduler_core.db.tables"
CONSTRUCTORS = {"insert", "update", "delete"}  # sqlalchemy's or a dialect's, given the table first
HELPERS = {"insert_ignore", "insert_ignore_many", "owner_write", "lock_owned"}  # given the table or its columns
SQL = re.compile(rf"\b(?:update|insert\s+(?:ignore\s+)?into|delete\s+from|replace\s+into)\s+[`\"']?{TABLE}\b", re.I)


class _Writes(ast.NodeVisitor):
    """The lines of one module that write ``executions``."""

    def __init__(self) -> None:
        self.tables: set[str] = set()  # names bound to the table
        self.modules: set[str] = set()  # names bound to scheduler_core.db.tables
        self.lines: list[int] = []

    def is_table(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.tables
        if isinstance(node, ast.Attribute) and node.attr == TABLE:  # tables.executions
            owner = ast.unparse(node.value)
            return owner in self.modules or owner == TABLES_MODULE
        if isinstance(node, ast.Subscript):  # metadata.tables["executions"]
            key = node.slice
            return isinstance(key, ast.Constant) and key.value == TABLE
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):  # Table("executions", ...)
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            return name == "Table" and any(isinstance(a, ast.Constant) and a.value == TABLE for a in node.args[:1])
        return False

    def mentions_table(self, node: ast.AST) -> bool:
        """``node`` is the table, or an expression over it (``executions.c.occurrence_id``)."""
        return any(self.is_table(part) for part in ast.walk(node))

    def bind(self, tree: ast.Module) -> None:
        """Every name bound to the table or its module, followed through assignments to a fixpoint."""
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if node.module == TABLES_MODULE and alias.name == TABLE:
                        self.tables.add(alias.asname or alias.name)
                    if f"{node.module}.{alias.name}" == TABLES_MODULE:
                        self.modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == TABLES_MODULE and alias.asname:
                        self.modules.add(alias.asname)
        while True:
            before = len(self.tables)
            for node in ast.walk(tree):
                targets: list[ast.expr] = []
                value: ast.expr | None = None
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
                    targets, value = [node.target], node.value
                if value is not None and self.is_table(value):
                    self.tables.update(t.id for t in targets if isinstance(t, ast.Name))
            if len(self.tables) == before:
                return

    def is_write(self, node: ast.Call) -> bool:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        arguments = [*node.args, *(k.value for k in node.keywords)]
        table = node.args[:1] or [k.value for k in node.keywords if k.arg == "table"]
        if name in CONSTRUCTORS and table and self.is_table(table[0]):  # update(executions), sa.delete(...)
            return True
        if name in HELPERS and any(self.mentions_table(a) for a in arguments):
            return True
        if isinstance(func, ast.Attribute) and func.attr in CONSTRUCTORS and self.is_table(func.value):
            return True  # executions.update()
        # text("UPDATE executions ..."), exec_driver_sql(...)
        return any(isinstance(a, ast.Constant) and isinstance(a.value, str) and bool(SQL.search(a.value))
                   for a in arguments)

    def visit_Call(self, node: ast.Call) -> None:
        if self.is_write(node):
            self.lines.append(node.lineno)
        self.generic_visit(node)


def writes(source: str) -> list[int]:
    """The lines of ``source`` that write the ``executions`` table."""
    tree = ast.parse(source)
    found = _Writes()
    found.bind(tree)
    found.visit(tree)
    return sorted(set(found.lines))


def _modules() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if not any(path.is_relative_to(exempt) for exempt in EXEMPT):
            yield path


def test_only_the_journal_writes_executions() -> None:
    outside = {f"{path.relative_to(ROOT)}:{line}" for path in _modules() if not path.is_relative_to(JOURNAL)
               for line in writes(path.read_text(encoding="utf-8"))}
    assert sorted(outside) == [], "write executions through a transition of scheduler_core/store/journal/"


def test_inside_the_journal_only_its_writing_modules_write() -> None:
    by_module = {path.stem: writes(path.read_text(encoding="utf-8")) for path in sorted(JOURNAL.glob("*.py"))}
    assert {module for module, lines in by_module.items() if lines and module not in WRITERS} == set()
    assert all(by_module[module] for module in WRITERS), "a writing module that writes nothing: update WRITERS"
    assert sum(len(lines) for lines in by_module.values()) >= 15  # the check sees the journal's own writes


TABLES = "from scheduler_core.db.tables import executions\n"


@pytest.mark.parametrize(("source", "expected"), [
    (TABLES + "update(executions).values(status='x')\n", [2]),
    (TABLES + "conn.execute(sa.delete(executions))\n", [2]),
    (TABLES + "postgresql.insert(executions).values(rows)\n", [2]),
    (TABLES + "executions.update().values(x=1)\n", [2]),
    (TABLES + "insert_ignore_many(conn, executions, rows, {})\n", [2]),
    (TABLES + "owner_write(conn, Owned(executions.c.occurrence_id, executions.c.updated_at), ids, build)\n", [2]),
    ("from scheduler_core.db.tables import executions as e\nupdate(e)\n", [2]),
    ("from scheduler_core.db import tables\nupdate(tables.executions)\n", [2]),
    ("import scheduler_core.db.tables as t\nconn.execute(t.executions.delete())\n", [2]),
    (TABLES + "journal = executions\nother = journal\nupdate(other)\n", [4]),
    ("update(metadata.tables['executions'])\n", [1]),
    ("conn.execute(text('UPDATE executions SET status = 1'))\n", [1]),
    ("conn.exec_driver_sql('delete from `executions` where 1')\n", [1]),
    ("conn.execute(text('INSERT INTO executions VALUES (1)'))\n", [1]),
    (TABLES + "select(executions).where(executions.c.status == 'x')\n", []),
    (TABLES + "update(slots).where(slots.c.occurrence_id == executions.c.occurrence_id)\n", []),
    (TABLES + "found = set()\nfound.update(conn.execute(select(executions.c.occurrence_id)))\n", []),
    (TABLES + "sa.sql.expression.update(table=executions)\n", [2]),
    ("from scheduler_core.db.tables import logs\ndelete(logs)\n", []),
    ('"""An UPDATE executions in a docstring is prose."""\n', []),
])
def test_the_check_sees_what_it_should(source: str, expected: list[int]) -> None:
    assert writes(source) == expected
