"""The per-dialect differences of the store, in one place.

- insert-or-ignore: PostgreSQL / SQLite ``ON CONFLICT DO NOTHING``; MySQL
  ``ON DUPLICATE KEY UPDATE pk = pk`` (not ``INSERT IGNORE``, which would also turn data
  errors into warnings);
- ``greatest(a, b)``: SQLite spells it ``max(a, b)``;
- batches (``Batch``, ``insert_ignore_many``, ``StatementCache``): PostgreSQL gets whole
  batches as array parameters (``= ANY(:ids)``, ``unnest``), so a statement does not depend
  on the batch size and is built, compiled and prepared once; elsewhere expanding ``IN``, a
  CASE keyed by the primary key per column, and multi-row VALUES.

Transactions, retries and held connections are in transactions.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import JSON, Column, Table, Text, any_, bindparam, case, cast, func, literal, null, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.types import TypeEngine

from scheduler_core.db.engine import dialect_kind

T = TypeVar("T")


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
        return set(conn.execute(statement, list(rows)).scalars().all())
    names = list(rows[0])

    def build() -> Any:
        columns = [_pg_unnest(f"ins_{n}", table.c[n]).label(n) for n in names]
        columns += [_pg_value(value, table.c[n]).label(n) for n, value in common.items()]
        pg = postgresql.insert(table).from_select([*names, *common], select(*columns))
        return pg.on_conflict_do_nothing().returning(key)

    statement = cache.get(name, build) if cache is not None else build()
    params = {f"ins_{n}": _pg_array([row[n] for row in rows], table.c[n]) for n in names}
    return set(conn.execute(statement, params).scalars().all())


class StatementCache:
    """Batch statements built once and reused (PostgreSQL, where they do not depend on the
    batch): SQLAlchemy then skips building, cache-key generation and compiling, and the
    driver prepares them once."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def get(self, name: str, build: Callable[[], T]) -> T:
        statement = self._built.get(name)
        if statement is None:
            statement = self._built[name] = build()
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


def _pg_array(values: list[Any], column: Column[Any]) -> Any:
    """A batch column as an array parameter. A JSON column travels as ONE JSON array document
    (a Python None as JSON ``null``, as the JSON type binds it), unpacked by ``_pg_unnest``:
    as a text array, the driver would quote and escape every element of every document in
    Python (a regular expression per quote), the largest single driver cost of a burst."""
    if isinstance(column.type, JSON):
        return json.dumps(values)
    return values


def _pg_unnest(name: str, column: Column[Any]) -> ColumnElement[Any]:
    """The array parameter ``name`` as rows. Several in one select list run in lockstep
    (PostgreSQL >= 10), so the n-th element of each array makes the n-th row."""
    if isinstance(column.type, JSON):
        return func.jsonb_array_elements(cast(bindparam(name, type_=Text()), JSONB))
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
