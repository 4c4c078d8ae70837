"""The database clock as SQL: ``db_now_ms()`` (PostgreSQL ``clock_timestamp()``, MySQL
``SYSDATE(3)``, SQLite ``julianday('now')``: read when the statement runs, for every lease) and
``db_statement_now_ms()`` (the statement's start: one value per statement, for a new row's
timestamps, never a lease). Which and why: docs/semantics.md, "Time". A test clock offset is
per engine (``scheduler_core.testing``), a parameter read when the statement runs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, bindparam
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from scheduler_core.errors import InvalidStoredValueError

MAX_SAFE_INTEGER = 2**53 - 1
# Where scheduler_core.testing keeps an engine's clock offset: on its dialect, a callable
# returning the offset in ms (absent: no offset).
CLOCK_OFFSET_ATTRIBUTE = "hai_test_clock_offset"


class _DbNowMs(FunctionElement[int]):
    """Current database time in unix milliseconds (BIGINT), read at each occurrence."""

    type = BigInteger()
    inherit_cache = True
    name = "db_now_ms"
    statement_start = False  # True: the time the statement started, one value per statement


class _DbStatementNowMs(_DbNowMs):
    """Database time at the start of the statement in unix milliseconds (BIGINT)."""

    inherit_cache = True
    name = "db_statement_now_ms"
    statement_start = True


@compiles(_DbNowMs, "postgresql")
def _compile_pg(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    reading = "statement_timestamp()" if element.statement_start else "clock_timestamp()"
    return _shifted(f"CAST(FLOOR(EXTRACT(EPOCH FROM {reading}) * 1000) AS BIGINT)", compiler, **kw)


@compiles(_DbNowMs, "mysql")
@compiles(_DbNowMs, "mariadb")
def _compile_mysql(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    reading = "NOW(3)" if element.statement_start else "SYSDATE(3)"
    return _shifted(f"CAST(FLOOR(UNIX_TIMESTAMP({reading}) * 1000) AS SIGNED)", compiler, **kw)


@compiles(_DbNowMs, "sqlite")
def _compile_sqlite(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    # 2440587.5 is the Julian day of the unix epoch; ROUND guards against the double
    # landing a hair below a whole millisecond before the cast truncates it. 'now' is one
    # reading per statement in SQLite, so both constructs compile alike.
    return _shifted("CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)", compiler, **kw)


@compiles(_DbNowMs)
def _compile_other(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    raise CompileError(f"{element.name}() is not defined for the {compiler.dialect.name} dialect")


def _shifted(reading: str, compiler: Any, **kw: Any) -> str:
    """``reading`` plus the engine's test clock offset, when it has one (scheduler_core.testing).

    The offset is a parameter whose value is read each time the statement runs, not a number
    in the SQL: a statement compiled (and cached by the engine) before the offset changed
    still adds the offset in force.
    """
    offset = getattr(compiler.dialect, CLOCK_OFFSET_ATTRIBUTE, None)
    if offset is None:
        return reading
    shift = bindparam("db_clock_offset_ms", type_=BigInteger(), unique=True, callable_=offset)
    return f"({reading} + {compiler.process(shift, **kw)})"


def db_now_ms() -> ColumnElement[int]:
    """The database's current time in unix ms, as an expression for use inside a statement."""
    return _DbNowMs()


def db_statement_now_ms() -> ColumnElement[int]:
    """The database's time when the current statement started, in unix ms: one value however
    often it occurs in the statement (see the module docstring; never for lease decisions)."""
    return _DbStatementNowMs()


def to_ms(value: Any, field: str) -> int:
    """Normalise a BIGINT millisecond value read from a driver (int, Decimal or str).

    Rejects None, negatives, fractions and values beyond 2**53-1 with
    :class:`InvalidStoredValueError` naming ``field``.
    """
    if isinstance(value, bool):
        raise InvalidStoredValueError(f"{field}: expected unix milliseconds, got a boolean", field=field)
    if isinstance(value, int):
        number = value
    elif isinstance(value, Decimal | str | float):
        number = _integral(value, field)
    else:
        raise InvalidStoredValueError(f"{field}: expected unix milliseconds, got {value!r}", field=field)
    if not 0 <= number <= MAX_SAFE_INTEGER:
        raise InvalidStoredValueError(f"{field}: {number} is outside 0..2**53-1", field=field)
    return number


def optional_ms(value: Any, field: str) -> int | None:
    return None if value is None else to_ms(value, field)


def _integral(value: Decimal | str | float, field: str) -> int:
    try:
        number = Decimal(value.strip() if isinstance(value, str) else value)
    except ArithmeticError:
        raise InvalidStoredValueError(f"{field}: {value!r} is not a number", field=field) from None
    if not number.is_finite() or number != number.to_integral_value():
        raise InvalidStoredValueError(f"{field}: {value!r} is not a whole number of milliseconds", field=field)
    return int(number)
