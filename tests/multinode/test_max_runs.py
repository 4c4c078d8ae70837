"""``max_runs`` in real processes, on every database (docs/semantics.md S10): two nodes, tasks due
every minute, the minute made short by stepping every node's DB clock (test_overlap.py).

- ``lim`` (max_runs 3; each step waits for its run to end): M0, M1 and M2 run, each to
  ``success`` -- the third one too, although the task disabled itself under it when it was
  seated -- and nothing after: no row, or ``skipped`` (``max_runs``) from a node that had not yet
  seen the disable.
- ``buf`` (max_runs 2, buffer_all): M0 runs long while M1 and M2 (perhaps M3) wait; M1 is seated
  as the second run and disables the task; M2, still waiting, is ``skipped`` (``max_runs``) and
  never runs, and so is any later one.

Each task is disabled once, marked, with one audit line by ``scheduler``; every run that started
is one the limit allowed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import audit_log
from scheduler_core.store.tasks import TaskRepository
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import effects_of, register_tasks, spawn_node, stop_nodes, wait_ready
from tests.helpers.stepped_minutes import SteppedClock, minute_rows, until_rows

pytestmark = pytest.mark.slow
MINUTE = 60_000
LIM_S = 2  # lim's hook: still running after the seat that disabled the task was committed
BUF_S = 20  # buf's hook: longer than the steps to M2 take, so that M1 and M2 wait behind M0


def test_a_task_disables_itself_after_exactly_max_runs(database: TestDatabase, engine: Engine,
                                                      tmp_path: Path) -> None:
    clock = SteppedClock(engine, tmp_path, 5)
    m = clock.minutes
    window = {"active_from_ms": m[0]}  # the minute the nodes start in is not due
    register_tasks(engine, [
        TaskDefinition(id="lim", name="lim", cron="* * * * *", max_runs=3, calendar=window),
        TaskDefinition(id="buf", name="buf", cron="* * * * *", max_runs=2, calendar=window,
                       overlap={"policy": "buffer_all", "buffer_limit": 5})])
    effects = tmp_path / "effects.log"
    options = {"lease_ms": 600_000, "clock_file": str(clock.file), "max_seconds": 300,
               "sleep_s": {"lim": LIM_S, "buf": BUF_S}}
    nodes = [spawn_node(database, f"node-{i}", effects, i, clock.env, options)
             for i in range(2)]
    tasks = TaskRepository(engine)
    try:
        wait_ready(effects, 2, nodes)
        until_rows("M0 running", lambda r: all(r.get(t, {}).get(m[0], ("",))[0] == "running" for t in ("lim", "buf")),
               engine, nodes)
        for step, minute in enumerate(m[1:], start=1):
            if step <= 3:  # lim's run of the minute before has ended
                until_rows(f"lim M{step - 1} done", lambda r, mm=m[step - 1]: r.get("lim", {}).get(mm, ("",))[0]
                       not in ("", "running"), engine, nodes)
            clock.step()
            if step <= 2:  # lim's runs M1 and M2 start; buf's M1.. wait
                until_rows(f"M{step}", lambda r, mm=minute: mm in r.get("lim", {}) and mm in r.get("buf", {}),
                       engine, nodes)
            else:  # lim is disabled: give every node a few ticks at this minute
                time.sleep(2)
        until_rows("all settled", lambda r: all(status not in ("running", "queued") for t in ("lim", "buf")
                                            for status, _ in r.get(t, {}).values()), engine, nodes, timeout=90)
    finally:
        stop_nodes(nodes)

    rows = minute_rows(engine)
    ran, spent = ("success", None), ("skipped", "max_runs")
    assert {k: v for k, v in rows["lim"].items() if k <= m[2]} == {m[0]: ran, m[1]: ran, m[2]: ran}
    assert all(v == spent for k, v in rows["lim"].items() if k > m[2]), rows["lim"]
    assert {k: v for k, v in rows["buf"].items() if k <= m[2]} == {m[0]: ran, m[1]: ran, m[2]: spent}
    assert all(v == spent for k, v in rows["buf"].items() if k > m[2]), rows["buf"]

    started = {line[1] for line in effects_of(effects) if line[0] == "effect"}
    assert started == {cron_occurrence_id("lim", x) for x in m[:3]} | {cron_occurrence_id("buf", x) for x in m[:2]}
    for task_id, limit, last in (("lim", 3, m[2]), ("buf", 2, m[1])):
        stored = tasks.get(task_id)
        assert stored is not None and not stored.enabled and stored.limit_reached_at is not None
        assert stored.runs_counted == limit
        with engine.connect() as conn:
            lines = conn.execute(select(audit_log.c.actor, audit_log.c.reason).where(
                audit_log.c.action == "task.disable", audit_log.c.target == task_id)).all()
        reason = f"reached max_runs: {limit} scheduled runs started (last: {cron_occurrence_id(task_id, last)})"
        assert [tuple(line) for line in lines] == [("scheduler", reason)]
