"""What the scheduler does about Galera itself (issue #33, part 2): causal sessions, a migration
lock the whole cluster sees, the settings it refuses, and the clocks of the Galera nodes.

- Every session on a Galera node asks for causal reads and updates (``wsrep_sync_wait`` 3).
- ``GET_LOCK`` holds on one Galera node only: three nodes migrating one empty database at the
  same instant, each through its own Galera node, used to fail on each other's tables. The
  migration lock is a certified row on Galera (scheduler_core/db/galera.py).
- ``wsrep_OSU_method=RSU`` (schema changes on one node only) is refused at start-up by name.
- A Galera node whose clock is 5 s ahead: a scheduler node starting through any node measures the
  others' heartbeats and refuses to start (CLOCK_SKEW) whether it is ahead or behind, and a node
  already running, behind, says so once.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import close_engine, create_engine, migration_state, upgrade
from scheduler_core.db.galera import check_galera, galera_node
from scheduler_core.db.outage import is_unreachable
from scheduler_core.errors import ClockSkewError, GaleraSettingError, InitFailedError
from scheduler_core.testing import set_clock_offset
from tests.galera.cluster import GaleraCluster, faketime_library
from tests.helpers import topology_suite as suite
from tests.helpers.node_cluster import db_now, next_boundary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _database(galera: GaleraCluster, prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with galera.connect(0) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    return name


@pytest.fixture
def database(galera: GaleraCluster) -> Iterator[str]:
    yield _database(galera, "settings")


def test_every_session_on_a_galera_node_reads_and_updates_causally(galera: GaleraCluster, database: str) -> None:
    engine = create_engine(galera.url(1, database))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT @@session.wsrep_sync_wait")).scalar() == 3
        node = check_galera(engine)
        assert node is not None and node.problem is None, node
        assert (node.node_name, node.cluster_status, node.cluster_size, node.ready) == ("galera2", "Primary", 3, True)
        with engine.connect() as conn:  # the session's value, not the server's, is what the check reads
            conn.execute(text("SET SESSION wsrep_sync_wait = 0"))
            stale = galera_node(conn)
        assert stale is not None and stale.problem is not None and "wsrep_sync_wait is 0" in stale.problem
    finally:
        close_engine(engine)


def _migrate_at_once(engines: list[Any]) -> list[Any]:
    """``upgrade`` through each engine on its own thread, released together; results or exceptions."""
    barrier = threading.Barrier(len(engines))
    outcomes: list[Any] = [None] * len(engines)

    def migrate(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = upgrade(engines[index])
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=migrate, args=(i,)) for i in range(len(engines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return outcomes


def test_three_nodes_migrating_one_database_at_the_same_instant_through_three_galera_nodes(
        galera: GaleraCluster) -> None:
    for _ in range(3):
        database = _database(galera, "migrate")
        engines = [create_engine(galera.url(i, database)) for i in range(3)]
        try:
            outcomes = _migrate_at_once(engines)
            failures = [o for o in outcomes if isinstance(o, Exception)]
            assert not failures, failures
            assert sum(1 for o in outcomes if o.changed) == 1, outcomes  # one migrated, two found it done
            for engine in engines:
                assert migration_state(engine).up_to_date
        finally:
            for engine in engines:
                close_engine(engine)


def test_schema_changes_on_one_node_only_are_refused_at_start_up(galera: GaleraCluster, database: str) -> None:
    engine = create_engine(galera.url(2, database))
    with galera.connect(2) as conn, conn.cursor() as cursor:
        cursor.execute("SET GLOBAL wsrep_OSU_method = 'RSU'")
    try:
        engine.dispose()  # new sessions take the new global value
        scheduler = Scheduler(engine, SchedulerConfig(node_id="rsu"))
        with pytest.raises(InitFailedError) as refused:
            scheduler.init()
        cause = refused.value.__cause__
        assert isinstance(cause, GaleraSettingError) and cause.code == "hai:reldb:013", refused.value
        assert "wsrep_OSU_method is RSU" in str(cause) and "TOI" in str(cause), cause
        with engine.connect() as conn:  # refused before anything was written: not even the schema
            assert conn.execute(text("SHOW TABLES")).all() == []
    finally:
        with galera.connect(2) as conn, conn.cursor() as cursor:
            cursor.execute("SET GLOBAL wsrep_OSU_method = 'TOI'")
        close_engine(engine)



def test_db_status_shows_the_galera_node_and_exits_5_on_a_setting_a_start_refuses(
        galera: GaleraCluster, database: str, tmp_path: Path) -> None:
    """The README's "hai-scheduler db status" on a Galera node, run as its users run it."""
    def status(index: int) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "HAI_DATABASE_URL": galera.url(index, database)}
        return subprocess.run([sys.executable, "-m", "webapp.cli", "db", "status"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    engine = create_engine(galera.url(0, database))
    upgrade(engine)
    close_engine(engine)
    done = status(1)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    shown = json.loads(done.stdout)["galera"]
    assert shown["node_name"] == "galera2" and shown["cluster_status"] == "Primary", shown
    assert shown["cluster_size"] == 3 and shown["ready"] is True and shown["sync_wait"] & 3 == 3, shown
    with galera.connect(2) as conn, conn.cursor() as cursor:
        cursor.execute("SET GLOBAL wsrep_OSU_method = 'RSU'")
    try:
        done = status(2)
    finally:
        with galera.connect(2) as conn, conn.cursor() as cursor:
            cursor.execute("SET GLOBAL wsrep_OSU_method = 'TOI'")
    assert done.returncode == 5 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    assert json.loads(done.stdout)["galera"]["osu_method"] == "RSU"
    assert "error: hai:reldb:013 wsrep_OSU_method is RSU" in done.stderr, done.stderr

@pytest.fixture
def node_three_ahead(galera: GaleraCluster) -> Iterator[float]:
    """Galera node 3 restarted on a wall clock 5 s ahead (libfaketime); put back afterwards."""
    if faketime_library() is None:
        suite.unavailable("libfaketime is missing (apt-get install faketime; .ci/run installs it)", "galera")
    galera.shut_down(2)
    galera.restart(2, faketime="+5s")
    try:
        offsets = [galera.db_clock_offset_s(i) for i in range(3)]
        print(f"[galera] NOW() minus this host's clock, per Galera node: {[round(o, 2) for o in offsets]}")
        yield offsets[2] - offsets[0]
    finally:
        galera.shut_down(2)
        galera.restart(2)


def test_a_node_whose_galera_clock_disagrees_is_refused_at_start_and_a_running_one_says_so(
        galera: GaleraCluster, database: str, node_three_ahead: float, caplog: pytest.LogCaptureFixture) -> None:
    assert node_three_ahead > 4, node_three_ahead
    engines = [create_engine(galera.url(i, database)) for i in (0, 2)]

    def node(node_id: str, engine: int, **config: Any) -> Scheduler:
        scheduler = Scheduler(engines[engine], SchedulerConfig(node_id=node_id, tick_interval_ms=200,
                                                               heartbeat_interval_ms=1000, **config),
                              hooks={"on_task_execute": lambda event: None})
        started.append(scheduler)
        scheduler.init()
        return scheduler

    started: list[Scheduler] = []
    try:
        upgrade(engines[0])
        offset, boundary = next_boundary(engines[0], lead_ms=10_000)
        for engine in engines:  # the test offset moves both readings alike: the 5 s stays
            set_clock_offset(engine, offset)
        # Two nodes starting at the same instant have no heartbeat to measure yet: both run.
        behind, ahead = node("behind", 0, groups=("behind",)), node("ahead", 1)
        together = [threading.Thread(target=s.start) for s in (behind, ahead)]
        for thread in together:
            thread.start()
        for thread in together:
            thread.join(timeout=60)
        assert behind.is_running and ahead.is_running
        # The node behind reads the live nodes after a tick with work due: a task at the boundary,
        # of a group only it serves (the node ahead would claim it 5 s earlier).
        caplog.set_level(logging.WARNING, logger="scheduler_core.node")
        minute = time.gmtime(boundary / 1000).tm_min
        behind.register(TaskDefinition(id="tick", name="tick", cron=f"{minute} * * * *", node_group="behind"))
        assert boundary > db_now(engines[0]), "the set-up took longer than the lead"
        deadline = time.monotonic() + 90
        while not any("hai:reldb:014" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.2)
        time.sleep(3)  # three more readings
        said = [r.getMessage() for r in caplog.records if "hai:reldb:014" in r.getMessage()]
        assert len(said) == 1 and "node ahead" in said[0] and "ms ahead of this node's" in said[0], said
        # A node starting now measures the others' heartbeats, ahead or behind, and is refused.
        for node_id, engine, other, direction in (("late-behind", 0, "ahead", "ahead of"),
                                                 ("late-ahead", 1, "behind", "behind")):
            late = node(node_id, engine)
            began = time.monotonic()
            with pytest.raises(ClockSkewError) as refused:
                late.start()
            print(f"[galera] {node_id} refused after {time.monotonic() - began:.1f} s: {refused.value}")
            assert refused.value.code == "hai:reldb:014" and not late.is_running
            assert f"node {other} " in str(refused.value) and f"ms {direction} this node's" in str(refused.value)
            assert "tolerated: 2000 ms" in str(refused.value), refused.value
    finally:
        for scheduler in started:
            scheduler.close()
        for engine in engines:
            close_engine(engine)


def test_a_galera_node_cut_off_from_the_group_is_an_unreachable_database(
        galera: GaleraCluster, database: str, caplog: pytest.LogCaptureFixture) -> None:
    """While it learns that it is cut off, the node's statements wait and time out (1205, its
    causal wait) or fail at COMMIT (1180); then it refuses them (1047). Each is an unreachable
    database (asked again with back-off, said once), never a bug with a traceback, and the
    connection is dropped rather than rolled back on a node that refuses everything."""
    engine = create_engine(galera.url(2, database))
    with galera.connect(0, database) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cursor.execute("INSERT INTO t VALUES (1, 0)")
    caplog.set_level(logging.WARNING)
    errors: list[DBAPIError] = []
    galera.isolate(2)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with engine.begin() as conn:
                    conn.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))
            except DBAPIError as exc:
                errors.append(exc)
                if "1047" in str(exc.orig):
                    break
            time.sleep(0.2)
    finally:
        galera.reconnect(2)
    codes = [e.orig.args[0] for e in errors]
    print(f"[galera] what the cut-off node answered, in order: {codes}")
    assert codes and codes[-1] == 1047, codes
    assert all(is_unreachable(e) and e.connection_invalidated for e in errors), errors
    assert not [r for r in caplog.records if "Exception during reset" in r.getMessage()]
    with engine.begin() as conn:  # rejoined: the same engine writes again
        conn.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))
    close_engine(engine)
