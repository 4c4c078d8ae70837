"""The database clock: the one time source that decides leases and occurrences.

``db_now_ms()`` is a SQL expression, evaluated by the database inside the statement that
uses it, giving unix milliseconds as a BIGINT:

- PostgreSQL: ``clock_timestamp()`` -- not ``now()``, which is frozen at transaction start
  and would let a write that waited on a row lock pass a deadline that has gone by.
- MySQL / MariaDB: ``SYSDATE(3)`` -- not ``NOW(3)``, which is fixed for the whole statement
  for the same reason. Sessions run with ``time_zone = '+00:00'`` (see engine.py) so that
  ``UNIX_TIMESTAMP`` never meets a DST-ambiguous local time.
- SQLite: ``julianday('now')`` (millisecond precision). SQLite runs inside each process,
  so its clock is the host's clock, shared by every process on that one host.

Each occurrence of ``db_now_ms()`` reads the clock anew, so two columns set from it in one
statement can differ by a millisecond. ``db_statement_now_ms()`` is the time the statement
started (PostgreSQL ``statement_timestamp()``, MySQL ``NOW(3)``; SQLite's ``'now'`` is one
reading per statement anyway): the same at every occurrence, for a new row's ``created_at`` and
``updated_at``. It never decides a lease: a statement may wait on a row lock after it started.

Node clocks never grant or extend ownership: read the time in Python for diagnostics and
for sleeping only.

Test-only offset: ``HAI_TEST_DB_CLOCK_OFFSET_MS`` (read at import) or
:func:`set_test_clock_offset_ms` adds a fixed offset to every ``db_now_ms()`` built
afterwards, so tests can reach a minute boundary without sleeping. It is refused when
``HAI_ENV=production``. Build statements per call (not as module constants) so the offset
in force is the one used.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, literal
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from scheduler_core.db.config import is_production
from scheduler_core.errors import ConfigError, InvalidStoredValueError

MAX_SAFE_INTEGER = 2**53 - 1


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
    return f"CAST(FLOOR(EXTRACT(EPOCH FROM {reading}) * 1000) AS BIGINT)"


@compiles(_DbNowMs, "mysql")
@compiles(_DbNowMs, "mariadb")
def _compile_mysql(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    reading = "NOW(3)" if element.statement_start else "SYSDATE(3)"
    return f"CAST(FLOOR(UNIX_TIMESTAMP({reading}) * 1000) AS SIGNED)"


@compiles(_DbNowMs, "sqlite")
def _compile_sqlite(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    # 2440587.5 is the Julian day of the unix epoch; ROUND guards against the double
    # landing a hair below a whole millisecond before the cast truncates it. 'now' is one
    # reading per statement in SQLite, so both constructs compile alike.
    return "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"


@compiles(_DbNowMs)
def _compile_other(element: _DbNowMs, compiler: Any, **kw: Any) -> str:
    raise CompileError(f"{element.name}() is not defined for the {compiler.dialect.name} dialect")


def _offset_from_env() -> int:
    raw = os.environ.get("HAI_TEST_DB_CLOCK_OFFSET_MS", "").strip()
    if not raw:
        return 0
    try:
        offset = int(raw)
    except ValueError:
        raise ConfigError("HAI_TEST_DB_CLOCK_OFFSET_MS", f"must be an integer (got {raw!r})") from None
    _refuse_offset_in_production(offset)
    return offset


def _refuse_offset_in_production(offset: int) -> None:
    if offset and is_production():
        raise ConfigError("HAI_TEST_DB_CLOCK_OFFSET_MS", "a test clock offset is refused when HAI_ENV=production")


_test_offset_ms = _offset_from_env()


def set_test_clock_offset_ms(offset_ms: int) -> None:
    """Shift every later ``db_now_ms()`` by ``offset_ms`` (tests only)."""
    global _test_offset_ms
    if isinstance(offset_ms, bool) or not isinstance(offset_ms, int):
        raise ConfigError("offset_ms", f"must be an integer (got {offset_ms!r})")
    _refuse_offset_in_production(offset_ms)
    _test_offset_ms = offset_ms


def test_clock_offset_ms() -> int:
    return _test_offset_ms


test_clock_offset_ms.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def db_now_ms() -> ColumnElement[int]:
    """The database's current time in unix ms, as an expression for use inside a statement."""
    if _test_offset_ms:
        return _DbNowMs() + literal(_test_offset_ms, BigInteger())
    return _DbNowMs()


def db_statement_now_ms() -> ColumnElement[int]:
    """The database's time when the current statement started, in unix ms: one value however
    often it occurs in the statement (see the module docstring; never for lease decisions)."""
    if _test_offset_ms:
        return _DbStatementNowMs() + literal(_test_offset_ms, BigInteger())
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
