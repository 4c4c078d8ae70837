"""The row-count contract of a single-row write."""

from __future__ import annotations

from typing import Any

from scheduler_core.errors import DatabaseError


def one_row(result: Any, what: str = "write") -> bool:
    """Whether a write meant for at most one row changed it: True for one row, False for none.

    More than one means the statement's key matched rows it was never meant to (a type or
    collation mismatch): raising rolls the transaction back, so nothing is changed.
    """
    count = int(result.rowcount)
    if count > 1:
        raise DatabaseError(f"{what} matched {count} rows where at most one was meant; rolled back, nothing changed")
    return count == 1
