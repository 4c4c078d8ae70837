"""Overlap policies in real processes, on every database (docs/semantics.md S9): two nodes, five
tasks due every minute whose handlers are slower than the minute.

The minute is made short: each node follows a clock file (tests/helpers/node_process.py) and the
test steps every node's DB clock one minute on at once (leases of 10 min, so nothing expires).
After the first minute M0 has started everywhere, M1, M2 and M3 come while M0 still runs:

- ``skip``: M1-M3 ``skipped`` (``slot_busy``);
- ``one`` (buffer_one): M1 waits and runs after M0; M2, M3 ``buffer_full``;
- ``all`` (buffer_all, limit 2): M1 and M2 wait and run in order; M3 ``buffer_full``;
- ``cancel`` (cancel_other, a hook that watches its signal): each new minute stops the one
  running, which ends ``interrupted`` (``superseded``); M3 runs to its end;
- ``term`` (terminate_other, an idempotent command whose process is killed): the same.

No two runs of one task ever overlap (the hooks' start and end lines), each minute is journaled
once, and every run that started is journaled as it ended.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import effects_of, journal, register_tasks, spawn_node, stop_nodes, wait_ready
from tests.helpers.stepped_minutes import SteppedClock, minute_rows, until_rows

pytestmark = pytest.mark.slow
MINUTE = 60_000
RUN_S = 8  # the hooks of skip, one and all: longer than the three steps take
CANCEL_S = 12  # cancel's hook: until a newer minute stops it, or to its end (the last one)


def _tasks(marker: Path, m0: int) -> list[TaskDefinition]:
    def task(task_id: str, overlap: dict[str, Any] | None, **more: Any) -> TaskDefinition:
        # active from M0: the minute the nodes start in is not due (a node's first tick runs its own minute)
        return TaskDefinition(id=task_id, name=task_id, cron="* * * * *", overlap=overlap,
                              calendar={"active_from_ms": m0}, **more)

    script = (f"import os, time; open({str(marker)!r}, 'a').write('start ' + os.environ['SCHEDULER_OCCURRENCE_ID']"
              " + '\\n'); time.sleep(600)")
    return [task("skip", None), task("one", {"policy": "buffer_one"}),
            task("all", {"policy": "buffer_all", "buffer_limit": 2}), task("cancel", {"policy": "cancel_other"}),
            task("term", {"policy": "terminate_other"}, idempotent=True,
                 handler={"kind": "command", "argv": [sys.executable, "-c", script], "timeout": 120_000})]


def test_each_overlap_policy_with_handlers_slower_than_the_minute(database: TestDatabase, engine: Engine,
                                                                   tmp_path: Path) -> None:
    clock = SteppedClock(engine, tmp_path, 4)  # the DB clock 3 s before M0
    minutes = clock.minutes
    m0 = minutes[0]
    marker, effects = tmp_path / "term.log", tmp_path / "effects.log"
    register_tasks(engine, _tasks(marker, m0))
    options = {"lease_ms": 600_000, "clock_file": str(clock.file), "max_seconds": 300,
               "sleep_s": {"skip": RUN_S, "one": RUN_S, "all": RUN_S, "cancel": CANCEL_S}}
    nodes = [spawn_node(database, f"node-{i}", effects, i, clock.env, options) for i in range(2)]
    try:
        wait_ready(effects, 2, nodes)
        until_rows("M0 running", lambda r: all(r.get(t, {}).get(m0, ("",))[0] == "running"
                                           for t in ("skip", "one", "all", "cancel", "term")), engine, nodes)
        for step, minute in enumerate(minutes[1:], start=1):
            clock.step()
            # each step waits until cancel and term run the new minute (the one before was stopped)
            until_rows(f"M{step}", lambda r, m=minute: all(r.get(t, {}).get(m, ("",))[0] == "running"
                                                       for t in ("cancel", "term"))
                   and m in r.get("skip", {}), engine, nodes)
        hooked = ("skip", "one", "all", "cancel")
        until_rows("all settled", lambda r: all(status not in ("running", "queued") for t in hooked
                                            for status, _ in r.get(t, {}).values()), engine, nodes)
    finally:
        stop_nodes(nodes)

    rows = minute_rows(engine)
    ran, skipped, full = ("success", None), ("skipped", "slot_busy"), ("skipped", "buffer_full")
    superseded = ("interrupted", "superseded")
    m = minutes
    assert rows["skip"] == {m[0]: ran, m[1]: skipped, m[2]: skipped, m[3]: skipped}
    assert rows["one"] == {m[0]: ran, m[1]: ran, m[2]: full, m[3]: full}
    assert rows["all"] == {m[0]: ran, m[1]: ran, m[2]: ran, m[3]: full}
    assert rows["cancel"] == {m[0]: superseded, m[1]: superseded, m[2]: superseded, m[3]: ran}
    assert rows["term"] == {m[0]: superseded, m[1]: superseded, m[2]: superseded, m[3]: ("interrupted", "closing")} \
        or rows["term"] == {m[0]: superseded, m[1]: superseded, m[2]: superseded, m[3]: ("unknown", "node_closed")}
    # the killed processes of term started one after another, each minute once
    started = [line.split()[1] for line in marker.read_text().splitlines()]
    assert started == [cron_occurrence_id("term", minute) for minute in m]

    lines = effects_of(effects)
    task_of = {row.occurrence_id: row.task_id for row in journal(engine)}
    running: dict[str, str] = {}
    for line in lines:  # the hooks' own record, in the order they wrote it: never two of a task at once
        if line[0] == "effect":
            task_id = task_of[line[1]]
            assert task_id not in running, (line, running)
            running[task_id] = line[1]
        elif line[0] == "done":
            running = {t: o for t, o in running.items() if o != line[1]}
    hooked = {line[1] for line in lines if line[0] == "effect"}
    assert hooked == {cron_occurrence_id(t, minute) for t in ("skip", "one", "all", "cancel")
                      for minute, (status, _) in rows[t].items() if status != "skipped"}

