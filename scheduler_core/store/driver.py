"""The hot PostgreSQL batch statements, run on the driver's cursor.

A node's claim, begin, terminal commit and log projection are a handful of statements that
never change (their batches are parameters: ``dialect.Batch``). Through ``Connection.execute``
each one pays SQLAlchemy's per-statement work -- an execution context, the parameters run
through their types, a result object -- about two thirds of a statement's client CPU on the
hosts measured (bench/PROFILE.md). ``DriverStatement`` compiles such a statement once and
sends it on the DBAPI cursor of the SQLAlchemy connection, inside that connection's
transaction (begun first if it was not, as SQLAlchemy's autobegin would), keeping what the
store relies on:

- the connection's ``before_cursor_execute`` / ``after_cursor_execute`` listeners are called
  (statement counts in tests and benchmarks; a listener cannot rewrite the statement here);
- a driver error is raised as SQLAlchemy's ``DBAPIError`` (so ``transactions.write`` retries
  a deadlock as before), and a lost connection invalidates the SQLAlchemy connection, as its
  own error handling does.

What the parameters may be: ``DriverStatement``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from scheduler_core.db.clock import CLOCK_OFFSET_ATTRIBUTE


def _same(value: Any) -> Any:
    return value


class _Compiled(NamedTuple):
    offset: Any  # the dialect's test clock offset when compiled (None: none)
    sql: str
    fixed: dict[str, Any]  # literal values, processed
    read: list[tuple[str, Any, Callable[[Any], Any]]]  # values read at each run: key, bind, processor


class DriverResult:
    """The rows of one statement (tuples), with the two ways the store reads them."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def all(self) -> list[tuple[Any, ...]]:
        return self.rows

    def scalars(self) -> _Scalars:
        return _Scalars(self.rows)


class _Scalars:
    """The first column of each row."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def all(self) -> list[Any]:
        return [row[0] for row in self.rows]


class DriverStatement:
    """A statement compiled once (for the first connection's dialect) and run on the cursor.
    Shared by threads: its compiled form is replaced whole, never changed in place.

    Parameters given at run time must need no type processing (strings and integers: the
    batches' JSON documents and array literals); the statement's literal values are processed
    once, when it is compiled, and a value read by a callable (the test DB-clock offset,
    db/clock.py) each time it runs."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._compiled: _Compiled | None = None

    def _compile(self, conn: Connection) -> _Compiled:
        """Compile for ``conn``'s dialect -- again once a test clock offset is installed on it
        (db/clock.py compiles the offset into the SQL only where one is installed; the engine
        then clears its own compiled cache likewise)."""
        dialect = conn.dialect
        offset = getattr(dialect, CLOCK_OFFSET_ATTRIBUTE, None)
        compiled = self.statement.compile(dialect=dialect)
        fixed: dict[str, Any] = {}
        read: list[tuple[str, Any, Callable[[Any], Any]]] = []
        for bind, name in compiled.bind_names.items():
            if bind.required:  # given at run time
                continue
            key = compiled.escaped_bind_names.get(name, name)
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect) or _same
            if bind.callable is not None:  # read each time it runs (the test DB-clock offset)
                read.append((key, bind, processor))
            else:
                fixed[key] = processor(bind.value)
        self._compiled = _Compiled(offset, compiled.string, fixed, read)
        return self._compiled

    def run(self, conn: Connection, params: Mapping[str, Any]) -> DriverResult:
        compiled = self._compiled
        if compiled is None or getattr(conn.dialect, CLOCK_OFFSET_ATTRIBUTE, None) is not compiled.offset:
            compiled = self._compile(conn)
        if not conn.in_transaction():
            conn.begin()  # as SQLAlchemy's autobegin would: its commit / rollback then end ours
        sql = compiled.sql
        args = {**compiled.fixed, **params}
        for key, bind, processor in compiled.read:
            args[key] = processor(bind.effective_value)
        dbapi_connection = conn.connection.dbapi_connection
        assert dbapi_connection is not None
        cursor = dbapi_connection.cursor()
        dispatch = conn.dispatch
        try:
            if dispatch.before_cursor_execute:
                dispatch.before_cursor_execute(conn, cursor, sql, args, None, False)
            cursor.execute(sql, args)
            rows: list[tuple[Any, ...]] = list(cursor.fetchall()) if cursor.description is not None else []
            if dispatch.after_cursor_execute:
                dispatch.after_cursor_execute(conn, cursor, sql, args, None, False)
        except conn.dialect.loaded_dbapi.Error as exc:
            lost = conn.dialect.is_disconnect(exc, dbapi_connection, cursor)
            if lost:
                conn.invalidate(exc)
            raise DBAPIError.instance(sql, args, exc, conn.dialect.loaded_dbapi.Error,
                                      connection_invalidated=lost, dialect=conn.dialect) from exc
        finally:
            cursor.close()
        return DriverResult(rows)
