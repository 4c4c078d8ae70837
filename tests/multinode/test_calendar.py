"""A task's calendar in real processes, across a DST change: an excluded or out-of-window minute is
not due -- no journal row, not even ``missed`` -- whether a live node reaches it or the first node
back after downtime journals the gap; an exclusion is read on the task's wall clock, so it holds in
the second pass of a repeated hour.

The database clock is moved (``HAI_TEST_DB_CLOCK_OFFSET_MS``) to 2026-10-25, when Europe/Berlin
goes back from 03:00 CEST to 02:00 CET at 01:00 UTC: 00:59 UTC is 02:59 CEST, 01:00 UTC is 02:00
CET (the second 02:00 of the day), 01:03 UTC is 02:03 CET.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.testing import set_clock_offset
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import db_now, effects_of, journal, register_tasks, spawn_node, stop_nodes, wait_ready

pytestmark = pytest.mark.slow
MINUTE = 60_000
FIRST = int(datetime(2026, 10, 25, 0, 59, tzinfo=UTC).timestamp() * 1000)  # 02:59 CEST, the first pass's end
DOWN = 3  # minutes the cluster is down for: 01:00, 01:01, 01:02 UTC (02:00-02:02 CET, the second pass)
GAP = [FIRST + m * MINUTE for m in range(1, DOWN + 1)]
BACK = FIRST + (DOWN + 1) * MINUTE  # 01:03 UTC, 02:03 CET: the minute the nodes come back in
BERLIN = "Europe/Berlin"


def _task(task_id: str, calendar: dict[str, Any] | None) -> TaskDefinition:
    return TaskDefinition(id=task_id, name=task_id, cron="* * * * *", timezone=BERLIN, calendar=calendar)


TASKS = [
    _task("plain", None),
    # wall minutes 02:00, 02:01 and 02:03 -- in the second pass too -- are excluded; 02:59 and 02:02 are not
    _task("wall", {"exclude": ["0-1 2 * * *", "3 2 * * *"]}),
    # active from 01:01 UTC up to (not including) 01:04 UTC
    _task("window", {"active_from_ms": FIRST + 2 * MINUTE, "active_until_ms": FIRST + 5 * MINUTE}),
    _task("day", {"exclude": ["2026-10-25"]}),  # the whole Berlin day
]
# What each task's journal holds afterwards, by minute: run at FIRST and BACK (live), missed in the gap.
EXPECTED = {
    "plain": {FIRST: "success", **dict.fromkeys(GAP, "missed"), BACK: "success"},
    "wall": {FIRST: "success", GAP[2]: "missed"},
    "window": {GAP[1]: "missed", GAP[2]: "missed", BACK: "success"},
    "day": {},
}


def _journaled(engine: Engine) -> dict[str, dict[int, str]]:
    found: dict[str, dict[int, str]] = {task.id: {} for task in TASKS}
    for row in journal(engine):
        found[row.task_id][row.scheduled_minute] = row.status
    return found


def _wait_for(engine: Engine, minute: int, procs: list[Any]) -> None:
    """Until the control task's occurrence at ``minute`` has ended (the others were due in the same tick)."""
    deadline = time.monotonic() + 60
    while _journaled(engine)["plain"].get(minute) not in ("success", "failed"):
        for proc in procs:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, _journaled(engine)
        time.sleep(0.2)
    time.sleep(1.0)  # a wrongly due occurrence of another task would have been claimed by now


def test_excluded_and_out_of_window_minutes_leave_no_row_across_a_dst_change(database: TestDatabase, engine: Engine,
                                                                            tmp_path: Path) -> None:
    offset = FIRST - 4_000 - db_now(engine)  # the DB clock 4 s before 00:59 UTC on the day clocks go back
    set_clock_offset(engine, offset)
    register_tasks(engine, TASKS)
    effects = tmp_path / "effects.log"
    before = spawn_node(database, "before", effects, 0, {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}, {})
    try:
        wait_ready(effects, 1, [before])
        _wait_for(engine, FIRST, [before])
    finally:
        stop_nodes([before])
    later = str(offset + (DOWN + 1) * MINUTE)  # two nodes come back DOWN minutes later, at once
    nodes = [spawn_node(database, f"after-{i}", effects, i, {"HAI_TEST_DB_CLOCK_OFFSET_MS": later}, {})
             for i in range(2)]
    try:
        wait_ready(effects, 3, nodes)
        _wait_for(engine, BACK, nodes)
    finally:
        stop_nodes(nodes)

    found = _journaled(engine)
    # A node starting in 00:58 (02:58 CEST) runs that minute too, when it starts in time: allowed by
    # the calendars of "plain" and "wall" only.
    started = {task: found[task].pop(FIRST - MINUTE) for task in found if FIRST - MINUTE in found[task]}
    assert set(started) <= {"plain", "wall"} and set(started.values()) <= {"success"}, started
    assert found == EXPECTED
    ran = [line[1] for line in effects_of(effects) if line[0] == "effect"]
    assert sorted(ran) == sorted([cron_occurrence_id(task, minute) for task, rows in EXPECTED.items()
                                  for minute, status in rows.items() if status == "success"]
                                 + [cron_occurrence_id(task, FIRST - MINUTE) for task in started])
