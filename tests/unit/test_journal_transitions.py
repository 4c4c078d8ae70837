"""The journal's transitions as docs/semantics.md ("6a. Journal transitions") writes them are the
ones the code declares (``store/journal/transitions.py``: ``TRANSITIONS``), and the writing
modules of the journal have no public function that is not one of them.

Adding a transition in code without documenting it, documenting one the code does not have, or
changing a row's statuses, who or guard on one side only, fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store import journal
from scheduler_core.store.journal.transitions import FINISH, RESOLVE, TRANSITIONS, WRITERS

ROOT = Path(__file__).resolve().parents[2]
SEMANTICS = ROOT / "docs" / "semantics.md"
JOURNAL = ROOT / "scheduler_core" / "store" / "journal"
HEADING = "## 6a. Journal transitions"
COLUMNS = ("from", "to", "transition", "who", "guard")

Row = tuple[str, str, str, str, str]


def documented(text: str) -> list[Row]:
    """The rows of the first table after ``HEADING``, code marks removed, in document order."""
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(tuple(cell.strip().replace("`", "") for cell in line.strip("|").split("|")))
    header, rule, *rows = table
    assert header == COLUMNS, header
    assert all(re.fullmatch(r"-+", cell) for cell in rule), rule
    assert all(len(row) == len(COLUMNS) for row in rows), rows
    return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]


def test_the_documented_table_is_the_code_table() -> None:
    docs = documented(SEMANTICS.read_text(encoding="utf-8"))
    code = [t.cells() for t in TRANSITIONS]
    assert sorted(set(docs) - set(code)) == [], "documented, but not in TRANSITIONS (or different there)"
    assert sorted(set(code) - set(docs)) == [], "in TRANSITIONS, but not documented (or documented differently)"
    assert docs == code, "same rows, another order: keep the table in the order of TRANSITIONS"


def test_every_transition_is_a_function_of_the_journal() -> None:
    names = [t.function for t in TRANSITIONS]
    assert len(names) == len(set(names))
    assert [name for name in names if not callable(getattr(journal, name, None))] == []


def public_functions(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_")}


def test_the_writing_modules_have_no_public_function_but_a_transition() -> None:
    found = {name: module for module in WRITERS for name in public_functions(JOURNAL / f"{module}.py")}
    declared = {t.function for t in TRANSITIONS}
    assert {name: module for name, module in found.items() if name not in declared} == {}
    assert declared - set(found) == set(), "a transition defined outside the writing modules"


def test_the_statuses_a_transition_names_are_statuses() -> None:
    for t in TRANSITIONS:
        assert all(isinstance(s, ExecutionStatus) for s in (*t.source, *(t.target or ())))
        assert t.source or t.target, f"{t.function}: neither makes nor has a row"


def test_a_transition_refuses_a_status_it_does_not_end_in() -> None:
    assert FINISH.check("success") is ExecutionStatus.SUCCESS
    assert RESOLVE.check("discarded") is ExecutionStatus.DISCARDED
    for transition, status in ((FINISH, "skipped"), (RESOLVE, "unknown"), (FINISH, "nonsense")):
        with pytest.raises(ValueError, match=transition.function):
            transition.check(status)


def test_the_parser_reads_a_table_and_stops_after_it() -> None:
    text = (f"intro\n\n{HEADING}\n\nWords.\n\n| from | to | transition | who | guard |\n"
            "| --- | --- | --- | --- | --- |\n| `queued` | `running` | `claim_queued` | a node | still `queued` |\n"
            "\nAfter.\n\n| a | b |\n\n## 7. Next\n")
    assert documented(text) == [("queued", "running", "claim_queued", "a node", "still queued")]
