"""db_now_ms(): the database's own clock, in whole milliseconds, evaluated per statement."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine

from scheduler_core.db import close_engine, create_engine, db_now_ms, db_statement_now_ms, to_ms
from scheduler_core.errors import ConfigError
from scheduler_core.testing import OFFSET_ENV, clock_offset, set_clock_offset, set_clock_offset_from_env
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


def test_a_test_offset_shifts_both_constructs_on_its_engine_only(engine: Engine, database: TestDatabase) -> None:
    """The offset lives on one engine: another engine on the same database reads the real
    clock. A statement built (and compiled, and cached by the engine) before a change follows
    the change: the offset is not part of the statement."""
    other = create_engine(database.url)
    statement = select(db_now_ms(), db_statement_now_ms())
    try:
        base = _read(engine, statement)
        set_clock_offset(engine, 60_000)
        shifted, unshifted = _read(engine, statement), _read(other, statement)
        set_clock_offset(engine, clock_offset(engine) - 120_000)
        earlier = _read(engine, statement)
        set_clock_offset(engine, 0)
        back = _read(engine, statement)
    finally:
        close_engine(other)
    assert clock_offset(other) == 0 == clock_offset(engine)
    for reading in (0, 1):  # db_now_ms(), db_statement_now_ms()
        assert 55_000 < shifted[reading] - base[reading] < 65_000
        assert abs(unshifted[reading] - base[reading]) < TOLERANCE_MS
        assert -65_000 < earlier[reading] - base[reading] < -55_000
        assert abs(back[reading] - base[reading]) < TOLERANCE_MS


def _read(engine: Engine, statement: Any) -> tuple[int, int]:
    with engine.connect() as conn:
        first, second = conn.execute(statement).one()
        conn.rollback()
    return int(first), int(second)


def test_a_test_offset_is_refused_in_production_and_read_from_the_environment(engine: Engine) -> None:
    production = {"HAI_ENV": "production"}
    with pytest.raises(ConfigError) as info:
        set_clock_offset(engine, 60_000, production)
    assert info.value.field == OFFSET_ENV
    with pytest.raises(ConfigError) as info:
        set_clock_offset_from_env(engine, {**production, OFFSET_ENV: "60000"})
    assert info.value.field == OFFSET_ENV
    with pytest.raises(ConfigError) as info:
        set_clock_offset_from_env(engine, {OFFSET_ENV: "soon"})
    assert info.value.field == OFFSET_ENV
    with pytest.raises(ConfigError) as info:
        set_clock_offset(engine, 1.5)  # type: ignore[arg-type]
    assert info.value.field == "offset_ms"
    set_clock_offset(engine, 0, production)  # no offset is no test seam
    assert clock_offset(engine) == 0 and set_clock_offset_from_env(engine, {}) == 0
    assert set_clock_offset_from_env(engine, {OFFSET_ENV: "-5000"}) == -5000 == clock_offset(engine)


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
