"""Backfill across processes, on every database (docs/semantics.md S11): two `hai-scheduler tasks
backfill` commands started at the same instant over the same range, and two node processes that
run what they queue. Each fire minute that never ran runs exactly once, one at a time, in minute
order; the minutes the journal says ran are never run again.

The task's calendar keeps its schedule to the past range, so that no live cron occurrence mixes
into the runs; its handler takes 0.4 s, so that two runs at once would show in the handlers' own
record (the effects file, appended atomically by each process)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import executions
from tests.conftest import TestDatabase
from tests.helpers.journal import execution_row, insert_rows
from tests.helpers.node_cluster import db_now, effects_of, register_tasks, spawn_node, stop_nodes, wait_ready
from tests.helpers.stepped_minutes import MINUTE, minute_rows, until_rows

pytestmark = pytest.mark.slow
RUN_S = 0.4


def _journaled(minute: int, status: str) -> dict[str, object]:
    row = execution_row(cron_occurrence_id("bf", minute), minute, status, task_id="bf")
    return {**row, "trigger": "cron", "scheduled_minute": minute, "attempt": 1 if status == "success" else 0}


def test_two_backfills_at_once_run_each_minute_once_one_at_a_time(database: TestDatabase, engine: Engine,
                                                                   tmp_path: Path) -> None:
    now = db_now(engine)
    m = [now - now % MINUTE - 40 * MINUTE + i * MINUTE for i in range(12)]
    calendar = {"active_from_ms": m[0], "active_until_ms": m[-1] + MINUTE}  # nothing of it is due now
    register_tasks(engine, [TaskDefinition(id="bf", name="bf", cron="* * * * *", calendar=calendar)])
    ran, missed, skipped = (m[1], m[4]), m[2], m[6]
    insert_rows(engine, executions, [*(_journaled(x, "success") for x in ran), _journaled(missed, "missed"),
                                     _journaled(skipped, "skipped")])
    effects = tmp_path / "effects.log"
    options = {"lease_ms": 600_000, "max_seconds": 300, "sleep_s": {"bf": RUN_S}}
    nodes = [spawn_node(database, f"node-{i}", effects, i, {}, options) for i in range(2)]
    try:
        wait_ready(effects, 2, nodes)
        command = [sys.executable, "-m", "webapp.cli", "tasks", "backfill", "bf", "--from", str(m[0] - 5 * MINUTE),
                   "--to", str(m[-1] + 5 * MINUTE), "--reason", "the outage", "--database-url", database.url]
        both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
        answers = [proc.communicate(timeout=60) for proc in both]
        assert [proc.returncode for proc in both] == [0, 0], answers
        queued = [int(out.split(": queued ")[1].split()[0]) for out, _ in answers]
        assert sum(queued) == 10 and 0 in queued, answers  # one queued all ten (its lock first), the other none
        until_rows("the backfill ran", lambda r: all(s not in ("queued", "running") for s, _ in r["bf"].values()),
                   engine, nodes, timeout=120)
        time.sleep(1)  # a tick or two more: nothing else starts
    finally:
        stop_nodes(nodes)

    rows = minute_rows(engine)["bf"]
    assert set(rows) == set(m)
    assert all(rows[x] == ("success", None) for x in m), rows
    lines = [line for line in effects_of(effects) if line[0] in ("effect", "done")]
    started = [line[1] for line in lines if line[0] == "effect"]
    never_ran = [x for x in m if x not in ran]
    assert started == [cron_occurrence_id("bf", x) for x in never_ran], "each once, in minute order, never what ran"
    for i in range(0, len(lines), 2):  # one at a time: each run ended before the next began
        assert (lines[i][0], lines[i + 1][0], lines[i][1]) == ("effect", "done", lines[i + 1][1]), lines
