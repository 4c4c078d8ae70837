"""PostgreSQL's hot batch statements run on the driver's cursor (store/driver.py).

What the store relies on from SQLAlchemy's own execution must hold there too: values read by
a callable at each run (the test DB-clock offset), the connection's cursor listeners (statement
counts), driver errors raised as ``DBAPIError`` with the SQLSTATE (``write`` retries on it),
and a lost connection invalidated so the pool does not hand it out again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, bindparam, event, literal, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from scheduler_core.db.clock import db_now_ms
from scheduler_core.store.driver import DriverStatement
from scheduler_core.testing import set_clock_offset


def test_a_value_read_by_a_callable_is_read_at_every_run(pg: Engine) -> None:
    offset = [5]
    read = bindparam("o", type_=Integer(), callable_=lambda: offset[0])
    statement = DriverStatement(select(literal(1, Integer()) + read, bindparam("given", type_=Integer())))
    with pg.connect() as conn:
        assert statement.run(conn, {"given": 7}).all() == [(6, 7)]
        offset[0] = 100
        assert statement.run(conn, {"given": 8}).all() == [(101, 8)]
        assert statement.run(conn, {"given": 9}).scalars().all() == [101]


def test_the_connections_cursor_listeners_see_each_statement(pg: Engine) -> None:
    seen: list[str] = []
    event.listen(pg, "before_cursor_execute", lambda _c, _cur, sql, *_: seen.append(sql))
    statement = DriverStatement(select(bindparam("n", type_=Integer())))
    with pg.connect() as conn:
        statement.run(conn, {"n": 1})
        statement.run(conn, {"n": 2})
    assert len(seen) == 2 and all(sql.startswith("SELECT") for sql in seen)


def test_a_driver_error_is_a_dbapi_error_and_the_transaction_rolls_back(pg: Engine) -> None:
    statement = DriverStatement(select(literal(1, Integer()) / bindparam("d", type_=Integer())))
    with pg.connect() as conn:
        with pytest.raises(DBAPIError) as raised:
            statement.run(conn, {"d": 0})
        assert getattr(raised.value.orig, "sqlstate", None) == "22012"  # division by zero
        assert not raised.value.connection_invalidated
        conn.rollback()
        assert statement.run(conn, {"d": 1}).all() == [(1,)]


def test_a_lost_connection_is_invalidated_and_the_next_one_works(pg: Engine) -> None:
    statement = DriverStatement(select(bindparam("n", type_=Integer())))
    with pg.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
        conn.rollback()
        with pg.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DBAPIError) as raised:
            statement.run(conn, {"n": 1})
        assert raised.value.connection_invalidated and conn.invalidated
    with pg.connect() as fresh:
        assert statement.run(fresh, {"n": 2}).all() == [(2,)]


def test_a_test_clock_offset_installed_after_the_first_run_is_applied(pg: Engine) -> None:
    statement = DriverStatement(select(db_now_ms()))
    with pg.connect() as conn:
        before = statement.run(conn, {}).scalars().all()[0]
        set_clock_offset(pg, 3_600_000)  # the first offset on this engine: the SQL gains a term
        shifted = statement.run(conn, {}).scalars().all()[0]
        set_clock_offset(pg, 7_200_000)  # a later change is a value read at each run
        further = statement.run(conn, {}).scalars().all()[0]
    assert 3_600_000 <= shifted - before < 3_660_000
    assert 3_600_000 <= further - shifted < 3_660_000
