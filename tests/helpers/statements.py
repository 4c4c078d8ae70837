"""Count the SQL an engine sends: cursor statements and transactions (commits and rollbacks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


@dataclass
class StatementCount:
    statements: int = 0  # every cursor statement (SELECT, INSERT, UPDATE, ...), on any thread
    transactions: int = 0  # commits and rollbacks


@contextmanager
def counting(engine: Engine) -> Iterator[StatementCount]:
    """Count what ``engine`` sends inside the ``with`` block."""
    count = StatementCount()

    def statement(*_: Any) -> None:
        count.statements += 1

    def transaction(*_: Any) -> None:
        count.transactions += 1

    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", transaction)
    event.listen(engine, "rollback", transaction)
    try:
        yield count
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", transaction)
        event.remove(engine, "rollback", transaction)
