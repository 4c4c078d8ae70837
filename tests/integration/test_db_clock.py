"""db_now_ms(): the database's own clock, in whole milliseconds, evaluated per statement."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine

from scheduler_core.db import db_now_ms, db_statement_now_ms, set_test_clock_offset_ms, to_ms
from scheduler_core.db.clock import test_clock_offset_ms
from tests.conftest import TestDatabase
from tests.helpers.processes import faketime_env, run_helper

TWO_HOURS_MS = 2 * 3600 * 1000
TOLERANCE_MS = 5_000


def _now(engine: Engine) -> int:
    with engine.connect() as conn:
        raw = conn.execute(select(db_now_ms())).scalar_one()
        conn.rollback()
    assert isinstance(raw, int), f"driver returned {type(raw).__name__}"
    return to_ms(raw, "db_now_ms")


def test_value_is_integer_milliseconds_near_host_time(engine: Engine) -> None:
    samples = []
    for _ in range(15):
        samples.append(_now(engine))
        time.sleep(0.013)
    assert all(isinstance(v, int) for v in samples)
    assert abs(samples[-1] - time.time() * 1000) < TOLERANCE_MS
    assert any(v % 1000 for v in samples), "values look like whole seconds"
    assert any(v % 10 for v in samples), "values look like centiseconds"
    assert samples == sorted(samples)


def test_time_advances_inside_one_transaction(engine: Engine) -> None:
    """Unlike now()/NOW(3), the clock is read when each statement runs, not at BEGIN."""
    with engine.begin() as conn:
        first = conn.execute(select(db_now_ms())).scalar_one()
        time.sleep(0.25)
        second = conn.execute(select(db_now_ms())).scalar_one()
    assert second - first >= 200


def test_the_statement_clock_is_one_reading_per_statement(engine: Engine) -> None:
    """db_statement_now_ms() is the same wherever it occurs in a statement (a new row's
    created_at and updated_at agree), moves on between statements of one transaction, and
    stays within a few ms of db_now_ms(); db_now_ms() is read anew at each occurrence."""
    kind = engine.dialect.name
    pause = {"postgresql": "pg_sleep(0.02)", "mysql": "SLEEP(0.02)", "mariadb": "SLEEP(0.02)"}.get(kind)
    with engine.begin() as conn:
        if pause is not None:  # the select list is evaluated left to right, with the pause between
            stable = conn.execute(select(db_statement_now_ms(), text(pause), db_statement_now_ms())).one()
            moving = conn.execute(select(db_now_ms(), text(pause), db_now_ms())).one()
            assert stable[0] == stable[2] and moving[2] - moving[0] >= 15, (stable, moving)
        first, clock = conn.execute(select(db_statement_now_ms(), db_now_ms())).one()
        time.sleep(0.05)
        second = conn.execute(select(db_statement_now_ms())).scalar_one()
    assert 0 <= clock - first < 1_000 and second - first >= 40


def test_test_offset_shifts_the_construct(engine: Engine) -> None:
    before = test_clock_offset_ms()
    base = _now(engine)
    try:
        set_test_clock_offset_ms(60_000)
        shifted = _now(engine)
    finally:
        set_test_clock_offset_ms(before)
    assert 55_000 < shifted - base < 65_000


@pytest.mark.parametrize("offset", ["+2h", "-2h"])
def test_server_clock_ignores_a_shifted_process_clock(server_database: TestDatabase, offset: str) -> None:
    probe = run_helper("clock_probe.py", server_database.url, env=faketime_env(offset))
    real_ms = time.time() * 1000
    sign = 1 if offset.startswith("+") else -1
    assert abs(probe["local_ms"] - (real_ms + sign * TWO_HOURS_MS)) < TOLERANCE_MS, "faketime did not shift"
    assert abs(probe["db_ms"] - real_ms) < TOLERANCE_MS, "db_now_ms() followed the process clock"


def test_sqlite_clock_is_the_process_clock(tmp_path: object) -> None:
    """Documented limit: SQLite's clock is the host clock every process on that host shares."""
    probe = run_helper("clock_probe.py", f"sqlite:///{tmp_path}/c.db", env=faketime_env("+2h"))
    assert abs(probe["db_ms"] - probe["local_ms"]) < TOLERANCE_MS
