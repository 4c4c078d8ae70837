"""Count the SQL an engine sends: cursor statements, transactions (commits and rollbacks) and
pool check-outs."""

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
    checkouts: int = 0  # connections taken from the pool (on a server each is pinged first: a round trip)


@contextmanager
def counting(engine: Engine) -> Iterator[StatementCount]:
    """Count what ``engine`` sends inside the ``with`` block."""
    count = StatementCount()

    def statement(*_: Any) -> None:
        count.statements += 1

    def transaction(*_: Any) -> None:
        count.transactions += 1

    def checkout(*_: Any) -> None:
        count.checkouts += 1

    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", transaction)
    event.listen(engine, "rollback", transaction)
    event.listen(engine.pool, "checkout", checkout)
    try:
        yield count
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", transaction)
        event.remove(engine, "rollback", transaction)
        event.remove(engine.pool, "checkout", checkout)
