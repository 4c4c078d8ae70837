"""A stopped cluster, in real processes: the first node back journals the gap (``missed`` /
``no_node_running``) and runs what each task's catch-up policy asks for, exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import (
    effects_of,
    journal,
    next_boundary,
    register_tasks,
    spawn_node,
    stop_nodes,
    wait_ready,
)

pytestmark = pytest.mark.slow
MINUTE = 60_000
DOWN = 4  # minutes the cluster is down for


def _by_minute(engine: Engine, task_id: str) -> dict[int, object]:
    return {row.scheduled_minute: row for row in journal(engine, task_id=task_id)}


def _settled(engine: Engine, minutes: dict[str, list[int]]) -> bool:
    for task_id, wanted in minutes.items():
        rows = _by_minute(engine, task_id)
        if any(m not in rows or rows[m].status in ("running", "queued") for m in wanted):
            return False
    return True


def _wait(engine: Engine, minutes: dict[str, list[int]], procs: list[object]) -> None:
    deadline = time.monotonic() + 60
    while not _settled(engine, minutes):
        assert time.monotonic() < deadline, {t: Counter(r.status for r in _by_minute(engine, t).values())
                                             for t in minutes}
        time.sleep(0.2)


def test_the_first_node_back_journals_the_gap_and_catches_up(database: TestDatabase, engine: Engine,
                                                             tmp_path: Path) -> None:
    offset, first = next_boundary(engine, lead_ms=4_000)
    register_tasks(engine, [
        TaskDefinition(id="none", name="None", cron="* * * * *"),
        TaskDefinition(id="latest", name="Latest", cron="* * * * *",
                       catchup={"policy": "latest", "window_ms": 30 * MINUTE}),
        TaskDefinition(id="all", name="All", cron="* * * * *", idempotent=True,
                       catchup={"policy": "all", "window_ms": 30 * MINUTE})])
    effects = tmp_path / "effects.log"
    before = spawn_node(database, "before", effects, 0, {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}, {})
    try:
        wait_ready(effects, 1, [before])
        _wait(engine, {"none": [first], "latest": [first], "all": [first]}, [before])
    finally:
        stop_nodes([before])
    back = first + (DOWN + 1) * MINUTE
    later = str(offset + (DOWN + 1) * MINUTE)  # the next node starts DOWN minutes later
    nodes = [spawn_node(database, f"after-{i}", effects, i, {"HAI_TEST_DB_CLOCK_OFFSET_MS": later}, {})
             for i in range(2)]  # two come back at once: still one row per minute
    gap = [first + m * MINUTE for m in range(1, DOWN + 1)]
    try:
        wait_ready(effects, 3, nodes)
        _wait(engine, {"none": [*gap, back], "latest": [*gap, back], "all": gap}, nodes)
    finally:
        stop_nodes(nodes)

    none, latest, every = (_by_minute(engine, t) for t in ("none", "latest", "all"))
    assert [(none[m].status, none[m].reason) for m in gap] == [("missed", "no_node_running")] * DOWN
    assert [latest[m].status for m in gap[:-1]] == ["missed"] * (DOWN - 1)
    assert (latest[gap[-1]].status, latest[gap[-1]].trigger) == ("success", "catchup")
    assert [(every[m].status, every[m].trigger) for m in gap] == [("success", "catchup")] * DOWN
    starts = [every[m].attempts[0]["started_at"] for m in gap]
    assert starts == sorted(starts), "catch-up runs out of order"
    assert {every[m].occurrence_id for m in gap} == {cron_occurrence_id("all", m) for m in gap}
    ran = Counter(e[1] for e in effects_of(effects) if e[0] == "effect")
    assert max(ran.values()) == 1, "an occurrence ran twice"
    assert (none[back].status, latest[back].status) == ("success", "success")  # the minute they came back in
