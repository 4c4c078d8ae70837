"""The per-dialect differences of the store, in one place.

- insert-or-ignore: PostgreSQL / SQLite ``ON CONFLICT DO NOTHING``; MySQL
  ``ON DUPLICATE KEY UPDATE pk = pk`` (not ``INSERT IGNORE``, which would also turn data
  errors into warnings);
- ``greatest(a, b)``: SQLite spells it ``max(a, b)``;
- batches (``Batch``, ``insert_ignore_many``, ``StatementCache``): PostgreSQL gets whole
  batches as parameters that do not depend on the batch size (string lists as one ``text[]``
  literal, ``= ANY($1::TEXT[])``; rows as one JSON document, ``jsonb_array_elements``), so a
  statement does not depend on the batch size and is built, compiled and prepared once;
  elsewhere expanding ``IN``, a CASE keyed by the primary key per column, and multi-row VALUES.

Transactions, retries and held connections are in transactions.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    Column,
    Integer,
    String,
    Table,
    Text,
    any_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    select,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.types import TypeEngine, UserDefinedType

from scheduler_core.db.engine import dialect_kind
from scheduler_core.store.driver import DriverStatement

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
    included (the DB clock). PostgreSQL: ``INSERT ... SELECT`` over the rows as one JSON
    document (``jsonb_array_elements``), a statement independent of the row count (kept in
    ``cache`` under ``name``). SQLite: an executemany with RETURNING, which SQLAlchemy sends
    as one multi-row INSERT from a statement compiled once (its "insertmanyvalues"; without
    RETURNING the driver would run one statement per row); MariaDB likewise. MySQL: one
    multi-row ``INSERT ... VALUES`` built per call (PyMySQL would split an executemany whose
    VALUES hold an expression into one statement per row).
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
        returning = insert_ignore(conn, table, []).values(**common).returning(key)
        return set(conn.execute(returning, list(rows)).scalars().all())
    names = list(rows[0])

    def build() -> Any:
        source = _pg_rows_source("ins_rows")
        columns = [_pg_element(source.c.row, i, table.c[n]).label(n) for i, n in enumerate(names)]
        columns += [_pg_value(value, table.c[n]).label(n) for n, value in common.items()]
        pg = postgresql.insert(table).from_select([*names, *common], select(*columns).select_from(source))
        return pg.on_conflict_do_nothing().returning(key)

    statement: Any = cache.driver(name, build) if cache is not None else build()
    params = {"ins_rows": _pg_rows_document([[row[n] for n in names] for row in rows])}
    return set(run(conn, statement, params).scalars().all())


class StatementCache:
    """Statements built once and reused. ``get``: the statement (SQLAlchemy then skips
    building and cache-key generation). ``driver``: a PostgreSQL batch statement, which does
    not depend on the batch, compiled once and run on the driver's cursor
    (``driver.DriverStatement``: SQLAlchemy's compiling and execution context are skipped
    too, and the driver prepares it once); run it with ``run``."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def get(self, name: str, build: Callable[[], T]) -> T:
        statement = self._built.get(name)
        if statement is None:
            statement = self._built[name] = build()
        return statement  # type: ignore[no-any-return]

    def driver(self, name: str, build: Callable[[], Any]) -> DriverStatement:
        return self.get(name, lambda: DriverStatement(build()))


def run(conn: Connection, statement: Any, params: Mapping[str, Any]) -> Any:
    """Execute a batch statement: a cached one on the driver's cursor, any other as usual."""
    if isinstance(statement, DriverStatement):
        return statement.run(conn, params)
    return conn.execute(statement, params)


class Batch:
    """The parameters of one batched statement, and the SQL that refers to them.

    Lists (``listed`` / ``one_of``) and per-row values keyed by a primary key (``rows`` /
    ``matches`` / ``value``). On PostgreSQL a list is an array parameter (``column = ANY(:name)``)
    and the rows one JSON document parameter, a derived table of its elements joined on the key
    (``UPDATE ... FROM``), so the statement does not depend on the batch and may come from a ``StatementCache``
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
        """The list ``name`` (see ``one_of``). On PostgreSQL a list of strings travels as one
        array literal (``_pg_text_array``)."""
        items = list(values)
        self.params[name] = _pg_text_array(items) if self.cacheable and _all_text(items) else items
        return self

    def one_of(self, column: Column[Any], name: str) -> ColumnElement[bool]:
        """``column`` is one of the list ``name`` (strings for a string column).

        On PostgreSQL a string list is the parameter itself typed ``text[]`` (``$1::TEXT[]``):
        the server reads the literal once, when the statement is bound, and the planner sees
        a constant array, which it can hash (PostgreSQL 14+) or use as an index condition.
        ``CAST($1::VARCHAR AS TEXT[])`` was a conversion the planner does not fold: where a
        small journal is read with a sequential scan, it parsed the whole literal again for
        every row (200 ids over 2,000 rows: about 90 ms instead of 1 ms).
        """
        if self.cacheable:
            if isinstance(column.type, String):
                return column == any_(bindparam(name, type_=TextArrayLiteral()))
            return column == any_(bindparam(name, type_=ARRAY(column.type)))
        return column.in_(bindparam(name, expanding=True))

    def rows(self, key: Column[Any], rows: Mapping[Any, Mapping[str, Any]],
             columns: Mapping[str, Column[Any]], shared: Mapping[str, ColumnElement[Any]] | None = None) -> Batch:
        """Per-row values keyed by ``key``. ``shared``: SQL expressions every row carries
        (PostgreSQL: columns of the derived table, see ``shared``)."""
        self._key, self._rows, self._columns, self._shared = key, rows, columns, dict(shared or {})
        if self.cacheable:
            names = list(columns)
            self.params["rows"] = _pg_rows_document([[k, *(row[n] for n in names)] for k, row in rows.items()])
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
        (The derived table holds a set-returning function, so PostgreSQL keeps it a subquery
        and evaluates its expressions when the statement runs; see ``_pg_rows_source``.)
        """
        if self.cacheable:
            return self._derived_table().c[name]  # type: ignore[no-any-return]
        return self._shared[name]

    def _derived_table(self) -> Any:
        if self._derived is None:
            assert self._key is not None
            source = _pg_rows_source("rows", self._shared)
            elements = [_pg_element(source.c.row, 0, self._key).label("batch_key")]
            elements += [_pg_element(source.c.row, i, column).label(name)
                         for i, (name, column) in enumerate(self._columns.items(), start=1)]
            elements += [source.c[name] for name in self._shared]
            self._derived = select(*elements).select_from(source).subquery("batch")
        return self._derived


class TextArrayLiteral(UserDefinedType[str]):
    """A PostgreSQL ``text[]`` parameter given as its array literal (``_pg_text_array``): the
    bind is rendered ``$1::TEXT[]`` and the value sent as it is (no processing), so the
    server parses it as ``text[]`` when binding -- a constant for the planner."""

    cache_ok = True
    render_bind_cast = True

    def get_col_spec(self, **_: Any) -> str:
        return "TEXT[]"


def _all_text(items: list[Any]) -> bool:
    return all(isinstance(item, str) for item in items)


def _pg_text_array(items: list[str]) -> str:
    """A list of strings as a PostgreSQL array literal (``{"a","b"}``), cast to ``text[]`` by
    the statement: each element double-quoted, backslash and double quote escaped, so commas,
    braces, spaces and the word NULL stay plain text. psycopg would adapt a Python list
    element by element in Python (finding the element type, quoting with regular expressions)."""
    return "{" + ",".join('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items) + "}"


def _pg_rows_document(rows: list[list[Any]]) -> str:
    """A batch's rows as ONE JSON document parameter, an array of arrays (one per row, its
    values in column order; a JSON column's value nested as it is). psycopg then sends one
    string: as array parameters (one per column) it adapted every element of every array in
    Python -- quoting and escaping each one, the largest driver cost of a burst."""
    return json.dumps(rows)


def _pg_rows_source(name: str, shared: Mapping[str, ColumnElement[Any]] | None = None) -> Any:
    """``SELECT jsonb_array_elements(:name) AS row, <shared expressions>``: one row per batch row.

    The set-returning function in the select list keeps it a subquery that PostgreSQL does not
    pull up into the statement using it, so the shared expressions are its columns (join
    conditions there, see ``Batch.shared``) and are evaluated when the statement runs."""
    rows = func.jsonb_array_elements(cast(bindparam(name, type_=Text()), JSONB)).label("row")
    return select(rows, *(expression.label(n) for n, expression in (shared or {}).items())).subquery(f"{name}_source")


def _pg_element(row: Any, index: int, column: Column[Any]) -> ColumnElement[Any]:
    """Element ``index`` of a rows-document row, typed for ``column``: a JSON column takes the
    JSON value itself (``->``; JSON ``null`` stays JSON ``null``, as the JSON type binds a
    Python None); any other the text (``->>``, SQL NULL for ``null``) cast to the column's
    type -- text for strings, whose length the column then checks on assignment (a cast to
    ``VARCHAR(n)`` would truncate silently)."""
    position = literal_column(str(index), Integer())
    if isinstance(column.type, JSON):
        return row.op("->")(position)  # type: ignore[no-any-return]
    text = row.op("->>")(position)
    if isinstance(column.type, (String, Text)):
        return cast(text, Text())
    return cast(text, column.type)


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
