"""Jitter across processes, on every database (docs/semantics.md O8): two node processes (in
different local time zones) step through three minutes of a jittered task. Each occurrence is
journaled at its minute with the delayed start its occurrence id gives -- the same whichever node
journaled it -- is started by one node, once, no earlier than that, and counts its fire lateness
from there."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.cron.jitter import jitter_delay
from scheduler_core.db.tables import executions
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import effects_of, register_tasks, spawn_node, stop_nodes, wait_ready
from tests.helpers.stepped_minutes import SteppedClock, until_rows

pytestmark = pytest.mark.slow
JITTER_MS = 8_000


def test_every_node_delays_an_occurrence_alike(database: TestDatabase, engine: Engine, tmp_path: Path) -> None:
    clock = SteppedClock(engine, tmp_path, 3)
    m = clock.minutes
    register_tasks(engine, [TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=JITTER_MS,
                                           calendar={"active_from_ms": m[0], "active_until_ms": m[-1] + 60_000})])
    effects = tmp_path / "effects.log"
    options = {"lease_ms": 600_000, "clock_file": str(clock.file), "max_seconds": 300}
    nodes = [spawn_node(database, f"node-{i}", effects, i, clock.env, options) for i in range(2)]
    try:
        wait_ready(effects, 2, nodes)
        for step, minute in enumerate(m):
            if step:
                clock.step()
            until_rows(f"M{step} ran", lambda r, mm=minute: r.get("jit", {}).get(mm, ("",))[0] == "success",
                       engine, nodes, timeout=60)
    finally:
        stop_nodes(nodes)

    with engine.connect() as conn:
        rows = {int(r.scheduled_minute): r for r in conn.execute(select(executions).where(
            executions.c.task_id == "jit"))}
        conn.rollback()
    assert set(rows) == set(m)
    for minute, row in rows.items():
        start = minute + jitter_delay("jit", minute, JITTER_MS)
        (attempt,) = row.attempts
        assert (row.status, row.trigger, row.next_attempt_at) == ("success", "cron", start)
        assert attempt["started_at"] >= start, (minute, attempt["started_at"] - minute, start - minute)
    ran = [line[1] for line in effects_of(effects) if line[0] == "effect"]
    assert sorted(ran) == sorted(cron_occurrence_id("jit", minute) for minute in m)  # each once
