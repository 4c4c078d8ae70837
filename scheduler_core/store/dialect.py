"""The per-dialect differences of the store, in one place.

- insert-or-ignore: PostgreSQL / SQLite ``ON CONFLICT DO NOTHING``; MySQL
  ``ON DUPLICATE KEY UPDATE pk = pk`` (not ``INSERT IGNORE``, which would also turn data
  errors into warnings);
- ``greatest(a, b)``: SQLite spells it ``max(a, b)``;
- batches (``Batch``, ``insert_ignore_many``, ``StatementCache``): PostgreSQL gets whole
  batches as array parameters (``= ANY(:ids)``, ``unnest``), so a statement does not depend
  on the batch size and is built, compiled and prepared once; elsewhere expanding ``IN``, a
  CASE keyed by the primary key per column, and multi-row VALUES;
- which errors mean "the transaction was rolled back because of lock contention, run it
  again": deadlocks and lock wait timeouts. Nothing else is retried: a failed COMMIT may
  have committed.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import JSON, Column, Table, Text, any_, bindparam, case, cast, func, literal, null, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.types import TypeEngine

from scheduler_core.db.clock import test_clock_offset_ms
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
    """INSERT of ``rows`` that silently skips rows conflicting with a unique key (no rows: the
    bare statement, for an executemany)."""
    kind = dialect_kind(bind)
    if kind == "postgresql":
        pg = postgresql.insert(table)
        return (pg.values(list(rows)) if rows else pg).on_conflict_do_nothing()
    if kind == "sqlite":
        lite = sqlite.insert(table)
        return (lite.values(list(rows)) if rows else lite).on_conflict_do_nothing()
    key = table.primary_key.columns.values()[0]
    my = mysql.insert(table)
    return (my.values(list(rows)) if rows else my).on_duplicate_key_update({key.name: key})


def insert_ignore_many(conn: Connection, table: Table, rows: Sequence[dict[str, Any]],
                       common: dict[str, Any] | None = None, cache: StatementCache | None = None,
                       name: str = "") -> set[Any] | None:
    """Insert-or-ignore of many rows as ONE statement; returns the inserted primary keys
    (PostgreSQL, SQLite), or None where the database cannot tell (MySQL).

    Every row has the same keys; ``common`` holds values every row gets, SQL expressions
    included (the DB clock). PostgreSQL: ``INSERT ... SELECT unnest(:column_array), ...``, a
    statement independent of the row count (kept in ``cache`` under ``name``). SQLite: an
    executemany with RETURNING, which SQLAlchemy sends as one multi-row INSERT from a statement
    compiled once (its "insertmanyvalues"; without RETURNING the driver would run one
    statement per row); MariaDB likewise. MySQL: one multi-row ``INSERT ... VALUES`` built per
    call (PyMySQL would split an executemany whose VALUES hold an expression into one
    statement per row).
    """
    key = table.primary_key.columns.values()[0]
    common = common or {}
    kind = dialect_kind(conn)
    if kind == "mysql":
        if conn.dialect.insert_returning:  # MariaDB >= 10.5: insertmanyvalues as for SQLite
            # ... whose RETURNING lists duplicates too (ON DUPLICATE KEY UPDATE): not an answer.
            conn.execute(insert_ignore(conn, table, []).values(**common).returning(key), list(rows)).all()
        else:
            conn.execute(insert_ignore(conn, table, [{**row, **common} for row in rows]))
        return None
    if kind == "sqlite":
        statement = insert_ignore(conn, table, []).values(**common).returning(key)
        return set(conn.execute(statement, list(rows)).scalars())
    names = list(rows[0])

    def build() -> Any:
        columns = [_pg_unnest(f"ins_{n}", table.c[n]).label(n) for n in names]
        columns += [_pg_value(value, table.c[n]).label(n) for n, value in common.items()]
        pg = postgresql.insert(table).from_select([*names, *common], select(*columns))
        return pg.on_conflict_do_nothing().returning(key)

    statement = cache.get(name, build) if cache is not None else build()
    params = {f"ins_{n}": _pg_array([row[n] for row in rows], table.c[n]) for n in names}
    return set(conn.execute(statement, params).scalars())


class StatementCache:
    """Batch statements built once and reused (PostgreSQL, where they do not depend on the
    batch): SQLAlchemy then skips building, cache-key generation and compiling, and the
    driver prepares them once. Keyed also by the test clock offset, which ``db_now_ms()``
    bakes into a statement."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, int], Any] = {}

    def get(self, name: str, build: Callable[[], T]) -> T:
        key = (name, test_clock_offset_ms())
        statement = self._built.get(key)
        if statement is None:
            statement = self._built[key] = build()
        return statement  # type: ignore[no-any-return]


class Batch:
    """The parameters of one batched statement, and the SQL that refers to them.

    Lists (``listed`` / ``one_of``) and per-row values keyed by a primary key (``rows`` /
    ``matches`` / ``value``). On PostgreSQL each is an array parameter: ``column = ANY(:name)``
    and a derived table of ``unnest(:array)`` columns joined on the key (``UPDATE ... FROM``),
    so the statement does not depend on the batch and may come from a ``StatementCache``
    (``cacheable``). Elsewhere an expanding ``IN`` and a CASE on the key per column (a
    constant when every row agrees), portable where ``UPDATE ... FROM (VALUES ...)`` is not.
    """

    def __init__(self, conn: Connection) -> None:
        self.cacheable = dialect_kind(conn) == "postgresql"
        self.params: dict[str, Any] = {}
        self._key: Column[Any] | None = None
        self._rows: Mapping[Any, Mapping[str, Any]] = {}
        self._columns: Mapping[str, Column[Any]] = {}
        self._shared: dict[str, ColumnElement[Any]] = {}
        self._derived: Any = None

    def listed(self, name: str, values: Iterable[Any]) -> Batch:
        self.params[name] = list(values)
        return self

    def one_of(self, column: Column[Any], name: str) -> ColumnElement[bool]:
        """``column`` is one of the list ``name``."""
        if self.cacheable:
            return column == any_(bindparam(name, type_=ARRAY(column.type)))
        return column.in_(bindparam(name, expanding=True))

    def rows(self, key: Column[Any], rows: Mapping[Any, Mapping[str, Any]],
             columns: Mapping[str, Column[Any]], shared: Mapping[str, ColumnElement[Any]] | None = None) -> Batch:
        """Per-row values keyed by ``key``. ``shared``: SQL expressions every row carries
        (PostgreSQL: columns of the derived table, see ``shared``)."""
        self._key, self._rows, self._columns, self._shared = key, rows, columns, dict(shared or {})
        if self.cacheable:
            keys = list(rows)
            self.params["rows_key"] = keys
            for name, column in columns.items():
                self.params[f"rows_{name}"] = _pg_array([rows[k][name] for k in keys], column)
        return self

    def matches(self) -> ColumnElement[bool]:
        """The rows of the batch (by key)."""
        assert self._key is not None
        if self.cacheable:
            joined: ColumnElement[bool] = self._key == self._derived_table().c.batch_key
            return joined
        return self._key.in_(list(self._rows))

    def value(self, name: str) -> ColumnElement[Any]:
        """Each row's own value of column ``name``."""
        if self.cacheable:
            return self._derived_table().c[name]  # type: ignore[no-any-return]
        assert self._key is not None
        return per_row(self._key, {k: row[name] for k, row in self._rows.items()}, self._columns[name].type)

    def shared(self, name: str) -> ColumnElement[Any]:
        """The expression ``name`` given to ``rows(shared=...)``.

        On PostgreSQL it is read from the batch's derived table, so a condition on it, such
        as ``status = 'running'``, is a join condition, not a filter of the target table:
        the planner then never estimates the target's rows from that filter. A journal's
        statistics say few rows run; in a burst every row runs. A plan built on "few" drives
        the statement from the status index, or from a scan joined row by row -- every
        running row for every batch row: 0.1-0.3 s a statement at 10,000 running. With the
        condition on the join, the primary key is the cheap way in, whatever the estimates.
        (The derived table holds ``unnest``, so PostgreSQL keeps it a subquery and
        evaluates its expressions when the statement runs.)
        """
        if self.cacheable:
            return self._derived_table().c[name]  # type: ignore[no-any-return]
        return self._shared[name]

    def _derived_table(self) -> Any:
        if self._derived is None:
            assert self._key is not None
            unnested = [_pg_unnest("rows_key", self._key).label("batch_key")]
            unnested += [_pg_unnest(f"rows_{name}", column).label(name) for name, column in self._columns.items()]
            unnested += [expression.label(name) for name, expression in self._shared.items()]
            self._derived = select(*unnested).subquery("batch")
        return self._derived


def _pg_array(values: list[Any], column: Column[Any]) -> list[Any]:
    """A batch column as an array parameter. JSON travels as text (a Python None as JSON
    ``null``, as the JSON type binds it) and is cast back by ``_pg_unnest``."""
    if isinstance(column.type, JSON):
        return [json.dumps(v) for v in values]
    return values


def _pg_unnest(name: str, column: Column[Any]) -> ColumnElement[Any]:
    if isinstance(column.type, JSON):
        return cast(func.unnest(bindparam(name, type_=ARRAY(Text()))), JSONB)
    return func.unnest(bindparam(name, type_=ARRAY(column.type)))


def _pg_value(value: Any, column: Column[Any]) -> ColumnElement[Any]:
    if isinstance(value, ColumnElement):
        return value
    return cast(null(), column.type) if value is None else literal(value, column.type)


def greatest(bind: Connection, left: Any, right: Any) -> ColumnElement[Any]:
    if dialect_kind(bind) == "sqlite":
        return func.max(left, right)
    return func.greatest(left, right)


def per_row(key: ColumnElement[Any], values: Mapping[Any, Any], type_: TypeEngine[Any]) -> ColumnElement[Any]:
    """The value each row of a batched UPDATE gets, by the row's ``key``.

    One constant when every row gets the same value (the common case: a burst's rows all
    finish ``success``), else ``CASE key WHEN k1 THEN v1 ... END``: portable to every
    database, unlike ``UPDATE ... FROM (VALUES ...)``.
    """

    def value(v: Any) -> ColumnElement[Any]:
        return null() if v is None else literal(v, type_)

    first, *rest = values.values()
    if all(v == first for v in rest):
        return value(first)
    return case({k: value(v) for k, v in values.items()}, value=key)


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


def write(bind: Engine | Connection, work: Callable[[Connection], T], attempts: int = WRITE_ATTEMPTS) -> T:
    """Run ``work`` in one write transaction; rerun it after a deadlock or lock timeout.

    ``bind`` is the engine (a pooled connection per transaction) or a connection its caller
    keeps between transactions (a flusher writing batch after batch). Database failures
    surface as :class:`DatabaseError` (``hai:reldb:002``) with the driver error as its cause;
    errors raised by ``work`` itself pass through unchanged.
    """
    for attempt in range(1, attempts + 1):
        try:
            if isinstance(bind, Connection):
                with bind.begin():
                    return work(bind)
            with bind.begin() as conn:
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


class AutocommitLine:
    """One connection held for single-statement reads in autocommit mode: each read is one
    round trip -- no pool check-out and pre-ping, no ``BEGIN``, no ``ROLLBACK`` -- where a
    pooled read transaction costs four on PostgreSQL and MySQL. For the tick snapshot, which
    every node reads every second; the connection is one of the node's reserved ones
    (``RESERVED_CONNECTIONS``). A read that fails discards the connection; a dropped one
    (server restart, idle timeout) is replaced and the read tried once more at once.
    Thread-safe; ``close`` returns the connection to the pool."""

    _held: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()
    _held_lock = threading.Lock()

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    @classmethod
    def held(cls, engine: Engine) -> int:
        """How many of ``engine``'s checked-out connections lines hold (outside any transaction)."""
        with cls._held_lock:
            return cls._held.get(engine, 0)

    @classmethod
    def _count(cls, engine: Engine, change: int) -> None:
        with cls._held_lock:
            cls._held[engine] = cls._held.get(engine, 0) + change

    def one(self, statement: Any) -> Any:
        """The one row of ``statement`` (a SELECT)."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return self._connection().execute(statement).one()
                except SQLAlchemyError as exc:
                    self._discard()
                    dropped = isinstance(exc, DBAPIError) and exc.connection_invalidated
                    if attempt == 2 or not dropped:
                        raise _database_error("read", exc) from exc
                except BaseException:
                    self._discard()  # interrupted mid-statement: the connection's state is unknown
                    raise
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _connection(self) -> Connection:
        if self._conn is None:
            options: dict[str, Any] = {"hai_autocommit": True}
            if dialect_kind(self.engine) != "sqlite":  # SQLite connections are in autocommit already
                options["isolation_level"] = "AUTOCOMMIT"
            # The statements run inside SQLAlchemy's autobegun transaction, which is never
            # ended: ending it would send a COMMIT or ROLLBACK the driver does not skip (PyMySQL).
            conn = self.engine.connect()
            try:
                conn.execution_options(**options)  # PyMySQL: SET AUTOCOMMIT, which may fail
            except BaseException:
                with contextlib.suppress(SQLAlchemyError):
                    conn.close()
                raise
            self._conn = conn
            self._count(self.engine, 1)
        return self._conn

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._count(self.engine, -1)
            with contextlib.suppress(SQLAlchemyError):  # gone already: the pool drops it
                conn.close()


def _database_error(action: str, exc: SQLAlchemyError) -> DatabaseError:
    orig = getattr(exc, "orig", None) or exc
    first_line = (str(orig).strip().splitlines() or [""])[0][:300]
    return DatabaseError(f"database {action} failed: {type(orig).__name__}: {first_line}")
