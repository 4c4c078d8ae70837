"""Pause on failure in real processes, on every database (docs/semantics.md R6a): two nodes, a
task due every minute whose hook always fails, and one that fails but once succeeds. Each is
paused after exactly ``pause_on_failure`` failed runs in a row -- a success in between starts the
count again -- with the reason naming the last occurrence, an audit entry, and no occurrence
after the pause. The minute is made short by stepping every node's DB clock (test_overlap.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import audit_log
from scheduler_core.store.tasks import TaskRepository
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import journal, register_tasks, spawn_node, stop_nodes, wait_ready
from tests.helpers.stepped_minutes import SteppedClock

pytestmark = pytest.mark.slow
MINUTE = 60_000


def _statuses(engine: Engine) -> dict[str, dict[int, str]]:
    found: dict[str, dict[int, str]] = {}
    for row in journal(engine):
        found.setdefault(row.task_id, {})[row.scheduled_minute] = row.status
    return found


def _until(what: str, check: Any, procs: list[Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_task_is_paused_after_exactly_n_failures_in_a_row(database: TestDatabase, engine: Engine,
                                                           tmp_path: Path) -> None:
    clock = SteppedClock(engine, tmp_path, 5)
    m = clock.minutes
    window = {"active_from_ms": m[0]}  # the minute the nodes start in is not due
    register_tasks(engine, [
        TaskDefinition(id="flaky", name="flaky", cron="* * * * *", pause_on_failure=2, calendar=window),
        TaskDefinition(id="streak", name="streak", cron="* * * * *", pause_on_failure=2, calendar=window)])
    effects = tmp_path / "effects.log"
    options = {"lease_ms": 600_000, "clock_file": str(clock.file), "fail": {"flaky": [], "streak": [m[1]]}}
    nodes = [spawn_node(database, f"node-{i}", effects, i, clock.env, options)
             for i in range(2)]
    tasks = TaskRepository(engine)

    def ended(minute: int, *task_ids: str) -> bool:
        rows = _statuses(engine)
        return all(rows.get(t, {}).get(minute) in ("success", "failed") for t in task_ids)

    def paused(task_id: str) -> bool:
        task = tasks.get(task_id)
        return task is not None and task.paused is not None

    try:
        wait_ready(effects, 2, nodes)
        _until("M0", lambda: ended(m[0], "flaky", "streak"), nodes)
        for step in range(1, 5):
            if step == 2:  # flaky failed at M0 and M1: paused before M2 is due
                _until("flaky paused", lambda: paused("flaky"), nodes)
            if step == 4:  # streak failed at M2 and M3 (M1 succeeded): paused before M4 is due
                _until("streak paused", lambda: paused("streak"), nodes)
            clock.step()
            if step < 4:
                _until(f"M{step}", lambda s=step: ended(m[s], "streak"), nodes)
        time.sleep(2)  # ticks of M4: a paused task is not due
    finally:
        stop_nodes(nodes)

    rows = _statuses(engine)
    assert rows["flaky"] == {m[0]: "failed", m[1]: "failed"}  # nothing after the pause
    assert rows["streak"] == {m[0]: "failed", m[1]: "success", m[2]: "failed", m[3]: "failed"}
    for task_id, last in (("flaky", m[1]), ("streak", m[3])):
        task = tasks.get(task_id)
        assert task is not None and task.paused is not None
        assert (task.paused.by, task.paused.until) == ("scheduler", None)
        assert task.paused.reason == f"failed 2 times in a row (last: {cron_occurrence_id(task_id, last)})"
    with engine.connect() as conn:
        audited = conn.execute(select(audit_log.c.actor, audit_log.c.action, audit_log.c.target, audit_log.c.reason)
                               .where(audit_log.c.actor == "scheduler")).all()
        conn.rollback()
    assert sorted(a.target for a in audited) == ["flaky", "streak"]
    assert {a.action for a in audited} == {"task.pause"}
