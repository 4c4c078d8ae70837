"""Several scheduler nodes in separate OS processes sharing one database.

Judged like a schedule checker: for every task and the minute under test the journal holds
exactly one occurrence, and the handlers' own record of side effects matches the journal
(no effect without a journal row, no second effect without a takeover in the journal).
On PostgreSQL and MariaDB the two nodes run with their clocks shifted by +2 h and -2 h
(libfaketime) and with different TZ settings; on SQLite (whose clock is the host's, shared
by every process) the nodes differ in TZ only.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db import close_engine, create_engine
from tests.conftest import TestDatabase
from tests.helpers.journal import wait_for_status
from tests.helpers.node_cluster import db_now, effects_of, journal, spawn_node, stop_nodes, wait_ready

pytestmark = pytest.mark.slow
TASKS = 200


def test_two_nodes_run_a_burst_of_occurrences_exactly_once(database: TestDatabase, engine: Engine,
                                                          tmp_path: Path) -> None:
    """200 tasks due in one minute, two nodes in different TZs, one manual key from both."""
    _run_burst(database, engine, tmp_path, TASKS, skew=False)


def test_skewed_node_clocks_agree_on_occurrences_and_leases(server_database: TestDatabase, tmp_path: Path) -> None:
    """Node clocks shifted by +2 h and -2 h: same occurrence ids, no early takeover."""
    engine = create_engine(server_database.url)
    try:
        _run_burst(server_database, engine, tmp_path, 20, skew=True)
    finally:
        close_engine(engine)


def _run_burst(database: TestDatabase, engine: Engine, tmp_path: Path, count: int, skew: bool) -> None:
    # Bring the next minute boundary to ~6 s from now through the test offset on the DB clock.
    now = db_now(engine)
    lead = (60_000 - now % 60_000) - 6_000
    offset = lead if lead > 0 else lead + 60_000
    boundary = now + offset + 6_000
    boundary -= boundary % 60_000
    minute, hour = time.gmtime(boundary / 1000).tm_min, time.gmtime(boundary / 1000).tm_hour
    admin = Scheduler(engine, SchedulerConfig(node_id="admin"))
    admin.init()
    try:
        for i in range(count):
            admin.register(TaskDefinition(id=f"burst-{i:03d}", name=f"Burst {i}", cron=f"{minute} {hour} * * *"))
        # Long and idempotent: renewed by its owner, must never be taken over by the other node.
        admin.register(TaskDefinition(id="long", name="Long", cron=f"{minute} {hour} * * *", idempotent=True,
                                      retry={"max_attempts": 5}))
        admin.register(TaskDefinition(id="manual", name="Manual", cron="0 0 1 1 *"))
    finally:
        admin.close()
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    options = {"lease_ms": 5000, "sleep_s": {"long": 12, "manual": 1}, "max_concurrency": 8,
               "trigger": {"task": "manual", "key": "same-key", "go_file": str(go)}}
    env = {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
    procs = [spawn_node(database, f"node-{i}", effects, i, env, options, skew) for i in range(2)]
    try:
        wait_ready(effects, 2, procs)
        go.touch()  # both nodes trigger the same key at once
        deadline = time.monotonic() + 90
        while True:
            rows = journal(engine, scheduled_minute=boundary)
            if len(rows) >= count + 1 and all(r.status != "running" for r in rows):
                break
            assert time.monotonic() < deadline, f"{len(rows)} journaled, statuses {Counter(r.status for r in rows)}"
            time.sleep(0.2)
        while sum(1 for e in effects_of(effects) if e[0] == "triggered") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        stop_nodes(procs)

    rows = journal(engine, scheduled_minute=boundary)
    by_task = Counter(r.task_id for r in rows)
    assert set(by_task) == {f"burst-{i:03d}" for i in range(count)} | {"long"}
    assert set(by_task.values()) == {1}, "a task has more than one journal row for the minute"
    assert {r.occurrence_id for r in rows} == {cron_occurrence_id(t, boundary) for t in by_task}
    assert Counter(r.status for r in rows) == {"success": count + 1}
    long_row = next(r for r in rows if r.task_id == "long")
    assert long_row.sequence == 1, "the long task was taken over although its owner renewed the lease"

    effect_lines = [e for e in effects_of(effects) if e[0] == "effect"]
    effects_by_occurrence = Counter(e[1] for e in effect_lines)
    journaled = {r.occurrence_id for r in journal(engine)}
    assert set(effects_by_occurrence) <= journaled, "a side effect without a journal row"
    assert max(effects_by_occurrence.values()) == 1, "a side effect happened twice"
    triggered = [e for e in effects_of(effects) if e[0] == "triggered"]
    assert len({(e[2], e[3]) for e in triggered}) == 1, triggered  # same occurrence and log for both callers
    assert effects_by_occurrence[triggered[0][2]] == 1
    assert len(journal(engine, task_id="manual")) == 1


def _start_victim(database: TestDatabase, tmp_path: Path, idempotent: bool) -> tuple[subprocess.Popen[str], Path]:
    admin_engine = create_engine(database.url)
    admin = Scheduler(admin_engine, SchedulerConfig(node_id="admin"))
    admin.init()
    admin.register(TaskDefinition(id="victim", name="Victim", cron="0 0 1 1 *", idempotent=idempotent,
                                  retry={"max_attempts": 3}))
    admin.close()
    close_engine(admin_engine)
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    go.touch()
    options = {"lease_ms": 2000, "block_forever": True, "start": False,
               "trigger": {"task": "victim", "go_file": str(go)}}
    proc = spawn_node(database, "victim-node", effects, 0, {}, options)
    deadline = time.monotonic() + 60
    while not any(e[0] == "effect" for e in effects_of(effects)):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc, effects


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)


def test_sigkill_idempotent_task_is_taken_over(database: TestDatabase, engine: Engine, tmp_path: Path) -> None:
    proc, effects = _start_victim(database, tmp_path, idempotent=True)
    occurrence = next(e for e in effects_of(effects) if e[0] == "effect")[1]
    _kill(proc)
    survivor = Scheduler(engine, SchedulerConfig(node_id="survivor", lease_ms=2000, tick_interval_ms=200),
                         hooks={"on_task_execute": lambda e: "recovered"})
    survivor.init()
    try:
        survivor.start()
        done = wait_for_status(survivor, occurrence, "success", timeout=30)
    finally:
        survivor.close()
    assert (done.sequence, done.owner_node) == (2, "survivor")
    assert [a.status for a in done.attempts] == ["unknown", "success"]


def test_sigkill_non_idempotent_task_becomes_unknown_until_resolved(database: TestDatabase, engine: Engine,
                                                                    tmp_path: Path) -> None:
    proc, effects = _start_victim(database, tmp_path, idempotent=False)
    occurrence = next(e for e in effects_of(effects) if e[0] == "effect")[1]
    _kill(proc)
    calls: list[str] = []
    survivor = Scheduler(engine, SchedulerConfig(node_id="survivor", lease_ms=2000, tick_interval_ms=200),
                         hooks={"on_task_execute": lambda e: calls.append(e.context.occurrence_id) or "ok"})
    survivor.init()
    try:
        survivor.start()
        unknown = wait_for_status(survivor, occurrence, "unknown", timeout=30)
        assert unknown.reason == "lease_expired" and calls == []
        later = survivor.trigger("victim", source="later")
        assert later.status == "skipped" and later.error == "slot_busy"
        survivor.execution.resolve_unknown(occurrence, "success", unknown.updated_at, "operator", "checked by hand")
        assert survivor.trigger("victim").status == "success"
    finally:
        survivor.close()
    assert len(calls) == 1
