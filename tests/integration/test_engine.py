"""Engine creation, session set-up, value round trips and explicit close on real databases."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from scheduler_core.db import close_engine, create_engine, database_config, dialect_kind, to_ms
from scheduler_core.db.tables import nodes, tasks
from scheduler_core.errors import DatabaseConnectionError

MAX_SAFE = 2**53 - 1


def test_failed_health_check_raises_and_hides_the_password() -> None:
    with pytest.raises(DatabaseConnectionError) as info:
        create_engine({"url": "postgresql://app:topsecret@127.0.0.1:1/x", "connect_timeout_ms": 2000})
    assert info.value.code == "hai:reldb:001"
    assert "topsecret" not in str(info.value) and "127.0.0.1:1" in str(info.value)


def test_sqlite_in_a_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(DatabaseConnectionError):
        create_engine(f"sqlite:///{tmp_path}/missing/dir/x.db")
    assert not (tmp_path / "missing").exists()


def test_processes_opening_a_fresh_sqlite_file_at_once_all_get_an_engine(tmp_path: Path) -> None:
    """Each switches the new file to WAL; SQLite tells the losers "database is locked" at once
    (no busy handler for that), which failed one run in four of two concurrent upgrades."""
    script = ("import sys, time; from scheduler_core.db import create_engine, close_engine; "
              "time.sleep(max(0.0, float(sys.argv[2]) - time.time())); "  # imports done: start together
              "close_engine(create_engine(sys.argv[1])); print('ok')")
    for round_ in range(5):
        url, start = f"sqlite:///{tmp_path}/fresh-{round_}.db", time.time() + 2.0
        procs = [subprocess.Popen([sys.executable, "-c", script, url, str(start)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, out.strip()) == (0, "ok"), err


def test_config_is_kept_and_close_is_explicit(database: object) -> None:
    engine = create_engine(database.url)  # type: ignore[attr-defined]
    assert database_config(engine) is not None
    close_engine(engine)
    assert database_config(engine) is None


def test_bigint_and_json_round_trip(engine: Engine) -> None:
    big_text = "x" * 20_000  # far past VARCHAR(255): payloads are JSON columns
    with engine.begin() as conn:
        conn.execute(insert(nodes).values(node_id="n1", host="h", pid=1, started_at=0, last_seen_at=MAX_SAFE))
        conn.execute(insert(tasks).values(
            id="t", name="T", cron="* * * * *", timezone="UTC", enabled=True, delete_after_run=False,
            idempotent=False, retry=None, handler={"kind": "hook"}, params={"blob": big_text, "n": [1, 2]},
            revision=1, created_at=1, updated_at=1))
    with engine.connect() as conn:
        seen = conn.execute(select(nodes.c.last_seen_at)).scalar_one()
        params = conn.execute(select(tasks.c.params)).scalar_one()
        enabled = conn.execute(select(tasks.c.enabled)).scalar_one()
    assert to_ms(seen, "last_seen_at") == MAX_SAFE
    assert params == {"blob": big_text, "n": [1, 2]}
    assert enabled is True


def test_ids_compare_case_sensitively_on_every_database(engine: Engine) -> None:
    row = {"name": "T", "cron": "* * * * *", "timezone": "UTC", "enabled": True, "delete_after_run": False,
           "idempotent": False, "revision": 1, "created_at": 1, "updated_at": 1}
    with engine.begin() as conn:
        conn.execute(insert(tasks), [{"id": "Report", **row}, {"id": "report", **row}])
    with engine.connect() as conn:
        found = conn.execute(select(tasks.c.id).where(tasks.c.id == "report")).scalars().all()
    assert found == ["report"]


def test_mysql_sessions_are_utc_and_read_committed(engine: Engine) -> None:
    if dialect_kind(engine) != "mysql":
        return
    with engine.connect() as conn:
        zone = conn.execute(text("SELECT @@session.time_zone")).scalar_one()
        isolation = conn.execute(text("SELECT @@session.tx_isolation")).scalar_one()
    assert (zone, isolation) == ("+00:00", "READ-COMMITTED")


def test_sqlite_writers_take_the_lock_at_begin_and_readers_do_not(tmp_path: Path) -> None:
    engine = create_engine({"url": f"sqlite:///{tmp_path}/lock.db", "busy_timeout_ms": 300})
    other = create_engine({"url": f"sqlite:///{tmp_path}/lock.db", "busy_timeout_ms": 300})
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (v INTEGER)"))
        holding = threading.Event()
        release = threading.Event()

        def hold_write_lock() -> None:
            with engine.begin():  # BEGIN IMMEDIATE: write lock taken here, before any write
                holding.set()
                release.wait(5)

        holder = threading.Thread(target=hold_write_lock)
        holder.start()
        assert holding.wait(5)
        with other.connect().execution_options(hai_read_only=True) as conn:
            assert conn.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
            conn.rollback()
        started = time.monotonic()
        with pytest.raises(OperationalError, match="locked"), other.begin():
            pass  # a writer waits for the lock at BEGIN (here: past its short busy timeout)
        assert time.monotonic() - started >= 0.25
        release.set()
        holder.join()
    finally:
        close_engine(engine)
        close_engine(other)
