"""The boundary-aligned wake across real processes: with ticks far apart, two nodes still start a
minute's occurrences when it begins on the DB clock, not at their next tick.

Each node's loop sleeps until the next due minute (estimated from its last snapshot) or the tick
interval, whichever is sooner (docs/architecture.md, step 1). With a 30 s interval, a node that
waited for its interval would start the minute's work about 24 s late here (the nodes start 6 s
before the minute); on time, every first attempt begins within a second or so.

Each node holds two runs at a time (two threads, no prefetch) and each run takes 6 s: the four
occurrences all start at the minute only if both nodes woke for it -- one node alone would start
two of them 6 s late.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import (
    cron_at,
    journal,
    next_boundary,
    register_tasks,
    spawn_node,
    stop_nodes,
    wait_ready,
)

pytestmark = pytest.mark.slow
TASKS = 4
RUN_S = 6.0
ON_TIME_MS = 5_000  # under a run's length, a fifth of an interval wake's delay


def test_two_nodes_wake_at_the_minute_not_at_their_next_tick(database: TestDatabase, engine: Engine,
                                                            tmp_path: Path) -> None:
    offset, boundary = next_boundary(engine, lead_ms=6_000)
    register_tasks(engine, (TaskDefinition(id=f"wake-{i:02d}", name=f"Wake {i}", cron=cron_at(boundary))
                            for i in range(TASKS)))
    effects = tmp_path / "effects.log"
    env = {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
    options = {"tick_interval_ms": 30_000, "max_concurrency": 2, "max_queued": 0,
               "sleep_s": {f"wake-{i:02d}": RUN_S for i in range(TASKS)}}
    procs = [spawn_node(database, f"wake-node-{i}", effects, i, env, options) for i in range(2)]
    try:
        wait_ready(effects, len(procs), procs)
        rows: list[Any] = []
        deadline = time.monotonic() + 60
        while len([r for r in rows if r.status == "success"]) < TASKS:
            assert time.monotonic() < deadline, f"the minute's work did not finish: {Counter(r.status for r in rows)}"
            time.sleep(0.2)
            rows = journal(engine, scheduled_minute=boundary)
    finally:
        stop_nodes(procs)
    late = sorted(r.attempts[0]["started_at"] - boundary for r in rows)
    assert late[0] >= 0, f"a run started before its minute: {late[0]} ms"
    assert late[-1] < ON_TIME_MS, f"the last start came {late[-1]} ms after the minute (an interval wake)"
    assert sorted(Counter(r.owner_node for r in rows).values()) == [2, 2], "both nodes woke for the minute"
