"""Capability routing across real processes: a node claims only occurrences it can run.

The README's deployment: dashboard workers are scheduler nodes without the application's hooks,
the application's own node has them. Hook occurrences must all run on a node with hooks (none
recorded ``interrupted: missing handler``), grouped tasks only on nodes of their group, and a
manual trigger made on a node that cannot run the task is run by one that can.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from tests.conftest import TestDatabase
from tests.helpers.node_cluster import (
    boundary_ahead,
    cron_at,
    effects_of,
    journal,
    next_boundary,
    register_tasks,
    spawn_node,
    stop_nodes,
    wait_ready,
)

pytestmark = pytest.mark.slow
PLAIN, BILLING = 12, 6


def _register(engine: Engine, boundary: int) -> None:
    register_tasks(engine, [
        *(TaskDefinition(id=f"plain-{i:02d}", name=f"Plain {i}", cron=cron_at(boundary)) for i in range(PLAIN)),
        *(TaskDefinition(id=f"bill-{i:02d}", name=f"Bill {i}", cron=cron_at(boundary), node_group="billing")
          for i in range(BILLING)),
        TaskDefinition(id="invoice", name="Invoice", cron="0 0 1 1 *", node_group="billing")])


def test_occurrences_run_only_on_nodes_able_to_run_them(database: TestDatabase, engine: Engine,
                                                        tmp_path: Path) -> None:
    offset, _ = next_boundary(engine)
    effects, go = tmp_path / "effects.log", tmp_path / "go"
    env = {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
    web = {"hooks": False, "trigger": {"task": "invoice", "key": "k", "go_file": str(go)}}
    nodes = {"web": web, "app": {}, "billing": {"groups": ["billing"]}}
    procs = [spawn_node(database, name, effects, i, env, {"max_concurrency": 4, **options})
             for i, (name, options) in enumerate(nodes.items())]
    try:
        wait_ready(effects, len(procs), procs)
        time.sleep(1.5)  # every node has sent its first heartbeat (what it can run)
        boundary = boundary_ahead(engine, offset)  # the lead's boundary, unless starting took longer
        _register(engine, boundary)
        go.touch()
        deadline = time.monotonic() + 150
        while True:
            rows = journal(engine, scheduled_minute=boundary)
            done = len(rows) == PLAIN + BILLING and all(r.status != "running" for r in rows)
            if done and any(e[0] == "triggered" for e in effects_of(effects)):
                break
            assert time.monotonic() < deadline, f"{len(rows)} journaled: {Counter(r.status for r in rows)}"
            time.sleep(0.2)
    finally:
        stop_nodes(procs)

    rows = journal(engine, scheduled_minute=boundary)
    assert Counter(r.status for r in rows) == {"success": PLAIN + BILLING}, "an occurrence did not run"
    owners = {r.task_id: r.owner_node for r in rows}
    assert {owners[f"bill-{i:02d}"] for i in range(BILLING)} == {"billing"}
    assert {owners[f"plain-{i:02d}"] for i in range(PLAIN)} <= {"app", "billing"}
    ran = Counter(e[2] for e in effects_of(effects) if e[0] == "effect")
    assert "web" not in ran and sum(ran.values()) == PLAIN + BILLING + 1
    (triggered,) = [e for e in effects_of(effects) if e[0] == "triggered"]
    assert triggered[1:2] + triggered[4:] == ["web", "success"]  # made on web, run elsewhere
    (invoice,) = journal(engine, task_id="invoice")
    assert (invoice.owner_node, invoice.trigger, invoice.source) == ("billing", "manual", "web")
