"""A PostgreSQL cluster's URL, on the real server (issue #31, part 1).

``HAI_DATABASE_URL`` may list a cluster's hosts, libpq style; the commands take it, libpq tries
the hosts in order, and ``target_session_attrs=read-write`` lands on the writable one. When the
server a pooled connection reached stops being a writable primary (a failover demoted it to a
standby, which refuses writes with SQLSTATE 25006), that connection and the pool's older ones are
dropped at the first refusal, so the next transaction connects afresh. The failover itself, on a
real primary and standby, is in tests/ha/.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import tasks
from scheduler_core.errors import DatabaseError
from scheduler_core.store.transactions import write
from tests.conftest import TestDatabase, _migrated_database, server


def _closed_port() -> int:
    with socket.socket() as probe:  # bound, never listening: a connection is refused at once
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pg_database(tmp_path: Path) -> Iterator[TestDatabase]:
    server("postgresql")
    yield from _migrated_database("postgresql", tmp_path)


def _cluster_url(database: TestDatabase, closed: int) -> str:
    """The database's URL with a dead host listed first: ``postgresql://u@127.0.0.1:<closed>,host:port/db``."""
    scheme, _, rest = database.url.partition("://")
    userinfo, _, location = rest.rpartition("@")
    address, _, name = location.partition("/")
    return f"{scheme}://{userinfo}@127.0.0.1:{closed},{address}/{name}?target_session_attrs=read-write"


def test_db_status_takes_a_cluster_url_and_shows_every_host(pg_database: TestDatabase, tmp_path: Path) -> None:
    closed = _closed_port()
    url = _cluster_url(pg_database, closed)
    env = {"PATH": os.environ["PATH"], "HAI_DATABASE_URL": url}
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "db", "status"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["database"]["hosts"][0] == f"127.0.0.1:{closed}" and len(report["database"]["hosts"]) == 2
    assert report["database"]["target_session_attrs"] == "read-write"
    assert report["replication"]["mode"] == "none" and report["replication"]["in_recovery"] is False
    assert "Traceback" not in done.stderr


def test_a_bad_host_list_is_a_named_error_before_anything_starts(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HAI_DATABASE_URL": "postgresql://postgres@127.0.0.1:1,127.0.0.1:5432x/test"}
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "db", "status"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "hosts[1].port: must be a port number, 1 to 65535 (got '5432x')" in done.stderr


def test_a_node_runs_on_a_cluster_url(pg_database: TestDatabase) -> None:
    engine = create_engine(_cluster_url(pg_database, _closed_port()))
    scheduler = Scheduler(engine, SchedulerConfig(tick_interval_ms=100))
    try:
        scheduler.init()
        scheduler.register(TaskDefinition(id="on-cluster", name="C", cron="0 3 * * *", handler={"kind": "hook"}))
        with engine.connect() as conn:
            assert conn.execute(select(tasks.c.id)).scalars().all() == ["on-cluster"]
            assert conn.execute(text("SELECT inet_server_port()")).scalar_one() != 1
    finally:
        scheduler.close()
        close_engine(engine)


def test_a_write_refused_as_on_a_standby_drops_the_connection(pg_database: TestDatabase) -> None:
    """A demoted primary answers writes with 25006 read_only_sql_transaction. The connection is
    made read-only here as a standby's is (default_transaction_read_only), on one pooled connection:
    the refused write is a DatabaseError, and the next write gets a fresh connection and commits.
    Without the handle_error rule the pool hands the read-only connection back and it fails again."""
    engine = create_engine({"url": _cluster_url(pg_database, _closed_port()), "pool_size": 1})
    try:
        with engine.connect() as conn:
            conn.execute(text("SET SESSION default_transaction_read_only = on"))
            conn.commit()
            before = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            conn.rollback()
        insert = text("INSERT INTO scheduler_meta (name, value) VALUES ('standby-probe', 1)")
        with pytest.raises(DatabaseError) as refused:
            write(engine, lambda conn: conn.execute(insert))
        assert getattr(refused.value.__cause__, "connection_invalidated", False)
        assert "25006" in str(getattr(refused.value.__cause__, "orig", None).sqlstate)  # type: ignore[union-attr]
        write(engine, lambda conn: conn.execute(insert))  # a fresh, writable connection
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != before
            assert conn.execute(text("SELECT value FROM scheduler_meta WHERE name = 'standby-probe'")).scalar_one()
    finally:
        close_engine(engine)
