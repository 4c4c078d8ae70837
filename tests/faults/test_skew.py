"""Node clocks skewed by +1 h and -1 h (libfaketime), the database clock untouched.

Two node processes in different time zones, one an hour ahead and one an hour behind, share a
PostgreSQL or MariaDB database across two DB-time minutes (the test offset puts DB time 45 s
into the first one, so the second boundary comes a few seconds later). Tasks due every minute
(some idempotent, some running longer than the lease so that renewals happen under skew), one
due only in the first minute, one only in the second, one never in the window. The oracle must
find zero missed and zero extra occurrences, every effect once; and since both nodes stay
alive, no takeover at all (a skewed clock must neither expire a live lease early nor keep a
dead one). SQLite is left out: its clock is each process's own, which libfaketime would shift.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import (
    register,
    spawn_fault_node,
    stop_nodes,
    wait_for,
    wait_ready,
)
from tests.helpers.journal import db_now, enter_minute
from tests.helpers.oracle import MINUTE_MS, TaskSpec, Window, check_database, read_effects, read_journal
from tests.helpers.processes import faketime_env

pytestmark = pytest.mark.slow
LEASE_MS = 4000  # renewed every 1.3 s: only a stall of seconds (or a skewed clock) could lose it
SKEWS = [("ahead", "+1h", "Asia/Tokyo"), ("behind", "-1h", "America/New_York")]


def _at(minute_ms: int) -> str:
    moment = time.gmtime(minute_ms / 1000)
    return f"{moment.tm_min} {moment.tm_hour} * * *"


def _tasks(first: int) -> list[TaskSpec]:
    second = first + MINUTE_MS
    every = [TaskSpec(f"every-{i}", "* * * * *", idempotent=i % 3 == 0) for i in range(12)]
    long = [TaskSpec(f"long-{i}", "* * * * *", idempotent=True) for i in range(2)]
    return [*every, *long, TaskSpec("first-only", _at(first)), TaskSpec("second-only", _at(second)),
            TaskSpec("outside", _at(second + MINUTE_MS))]


def test_skewed_node_clocks_miss_nothing_and_run_nothing_twice(server_database: TestDatabase,
                                                               server_engine: Engine, events: Path) -> None:
    engine = server_engine
    first = enter_minute(engine, seconds_into=45)
    tasks = _tasks(first)
    register(engine, tasks)
    longer = 1.5 * LEASE_MS / 1000  # outlives its first lease: renewed under skew
    options = {"lease_ms": LEASE_MS, "max_concurrency": 8, "sleep_s": {"long-0": longer, "long-1": longer}}
    procs = [spawn_fault_node(server_database.url, name, events, options,
                              env={**faketime_env(shift), "TZ": zone}, clock=engine) for name, shift, zone in SKEWS]
    try:
        for (name, _, _), proc in zip(SKEWS, procs, strict=True):
            wait_ready(events, name, proc)
        assert db_now(engine) < first + MINUTE_MS - 1000, "the nodes took the whole first minute to start"
        second = first + MINUTE_MS
        expected = sum(1 for t in tasks if t.id != "outside") + sum(1 for t in tasks if t.cron == "* * * * *")

        def settled() -> bool:
            rows = [r for r in read_journal(engine).executions if r["scheduled_minute"] in (first, second)]
            return len(rows) == expected and all(r["status"] != "running" for r in rows)

        wait_for(settled, "both minutes to be journaled and settled", procs, timeout=90)
    finally:
        stop_nodes(procs)

    effects = read_effects(events)
    assert check_database(engine, Window(first, second), tasks, effects) == []
    rows = read_journal(engine).executions
    assert Counter(r["status"] for r in rows) == {"success": expected}, [
        (r["task_id"], r["scheduled_minute"], r["status"], r["reason"], r["owner_node"], r["sequence"])
        for r in rows if r["status"] != "success"]
    assert {r["sequence"] for r in rows} == {1}, "a live owner's execution was taken over under clock skew"
    assert max(Counter(e.occurrence_id for e in effects).values()) == 1
