"""The per-dialect differences of the store, in one place.

- insert-or-ignore: PostgreSQL / SQLite ``ON CONFLICT DO NOTHING``; MySQL
  ``ON DUPLICATE KEY UPDATE pk = pk`` (not ``INSERT IGNORE``, which would also turn data
  errors into warnings);
- ``greatest(a, b)``: SQLite spells it ``max(a, b)``;
- which errors mean "the transaction was rolled back because of lock contention, run it
  again": deadlocks and lock wait timeouts. Nothing else is retried: a failed COMMIT may
  have committed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Table, func
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert

from scheduler_core.db.engine import dialect_kind
from scheduler_core.errors import DatabaseError

T = TypeVar("T")
_MYSQL_RETRYABLE = {1213, 1205}  # deadlock, lock wait timeout
_PG_RETRYABLE = {"40P01", "40001"}  # deadlock detected, serialization failure
WRITE_ATTEMPTS = 4
# Event.wait rather than time.sleep: the same relative wait, and it also behaves under
# libfaketime, which the clock-skew tests use (time.sleep's absolute-deadline nanosleep does not).
_pause = threading.Event().wait


def insert_ignore(bind: Connection, table: Table, rows: Sequence[dict[str, Any]]) -> Insert:
    """INSERT of ``rows`` that silently skips rows conflicting with a unique key."""
    kind = dialect_kind(bind)
    if kind == "postgresql":
        return postgresql.insert(table).values(list(rows)).on_conflict_do_nothing()
    if kind == "sqlite":
        return sqlite.insert(table).values(list(rows)).on_conflict_do_nothing()
    key = table.primary_key.columns.values()[0]
    return mysql.insert(table).values(list(rows)).on_duplicate_key_update({key.name: key})


def greatest(bind: Connection, left: Any, right: Any) -> ColumnElement[Any]:
    if dialect_kind(bind) == "sqlite":
        return func.max(left, right)
    return func.greatest(left, right)


def is_retryable(exc: BaseException) -> bool:
    if not isinstance(exc, DBAPIError) or exc.connection_invalidated:
        return False
    orig = exc.orig
    code = getattr(orig, "sqlstate", None)
    if code in _PG_RETRYABLE:
        return True
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_RETRYABLE:
        return True
    return "database is locked" in str(orig)


def write(engine: Engine, work: Callable[[Connection], T], attempts: int = WRITE_ATTEMPTS) -> T:
    """Run ``work`` in one write transaction; rerun it after a deadlock or lock timeout.

    Database failures surface as :class:`DatabaseError` (``hai:reldb:002``) with the driver
    error as its cause; errors raised by ``work`` itself pass through unchanged.
    """
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except DBAPIError as exc:
            if attempt == attempts or not is_retryable(exc):
                raise _database_error("write", exc) from exc
            _pause(random.uniform(0.005, 0.05) * attempt)
        except SQLAlchemyError as exc:
            raise _database_error("write", exc) from exc
    raise AssertionError("unreachable")


def read(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in a read-only transaction (SQLite: no write lock taken)."""
    try:
        with engine.connect().execution_options(hai_read_only=True) as conn:
            try:
                return work(conn)
            finally:
                conn.rollback()
    except SQLAlchemyError as exc:
        raise _database_error("read", exc) from exc


def _database_error(action: str, exc: SQLAlchemyError) -> DatabaseError:
    orig = getattr(exc, "orig", None) or exc
    first_line = (str(orig).strip().splitlines() or [""])[0][:300]
    return DatabaseError(f"database {action} failed: {type(orig).__name__}: {first_line}")
