"""Every module docstring in scheduler_core/ and webapp/ is at most 20 lines.

A module's docstring says what the module is for; detail about one function belongs in that
function's docstring, and the design in docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler_core", "webapp")
MAX_LINES = 20


def docstring_lines(source: str) -> int:
    """Lines of the module docstring as written, from the opening quotes to the last text line
    (0 without one)."""
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    return len(docstring.splitlines()) if docstring else 0


def test_module_docstrings_are_at_most_20_lines() -> None:
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert paths
    too_long = {str(path.relative_to(ROOT)): lines for path in paths
                if (lines := docstring_lines(path.read_text(encoding="utf-8"))) > MAX_LINES}
    assert too_long == {}


@pytest.mark.parametrize(("source", "expected"), [
    ('"""One line."""\n', 1),
    ('"""Two\nlines.\n"""\nimport os\n', 2),
    ("import os\n", 0),
    ('x = 1\n"""Not a docstring."""\n', 0),
])
def test_docstring_lines_counts_the_text_lines(source: str, expected: int) -> None:
    assert docstring_lines(source) == expected
