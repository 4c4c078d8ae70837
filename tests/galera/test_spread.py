"""Three scheduler nodes, each writing to a *different* Galera node (issue #33, part 1: find out).

The multi-node spread scenario of tests/multinode/test_spread.py on the cluster: 60 tasks due in
each of two minutes, handlers of 1-4 s, one scheduler node per Galera node. Row locks are taken
on one Galera node only; a conflicting write elsewhere is found at COMMIT by certification and
aborted (1213). Judged as on one server: every occurrence journaled once and run once, nothing
skipped, every node a share of each minute.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import close_engine, create_engine
from tests.conftest import TestDatabase
from tests.galera.cluster import GaleraCluster
from tests.helpers.node_cluster import (
    boundary_ahead,
    effects_of,
    journal,
    next_boundary,
    spawn_node,
    stop_nodes,
    wait_ready,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TASKS, NODES, MINUTES = 60, 3, 2


def _handler_seconds(index: int) -> float:
    return 1.0 + (index * 7 % 31) / 10


def test_three_nodes_on_three_galera_nodes_run_each_occurrence_once(galera: GaleraCluster, tmp_path: Path) -> None:
    engine = create_engine(galera.url(0))
    admin = Scheduler(engine, SchedulerConfig(node_id="admin"))
    admin.init()  # migrates through the first Galera node
    admin.close()
    try:
        offset, _ = next_boundary(engine, lead_ms=6_000)
        effects = tmp_path / "effects.log"
        options = {"sleep_s": {f"work-{i:03d}": _handler_seconds(i) for i in range(TASKS)}, "lease_ms": 30_000,
                   "tick_interval_ms": 1000}
        env = {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
        procs = [spawn_node(TestDatabase("mysql", galera.url(i)), f"node-{i}", effects, i, env, options)
                 for i in range(NODES)]
        try:
            wait_ready(effects, NODES, procs)
            boundary = boundary_ahead(engine, offset)
            minutes = [boundary + 60_000 * m for m in range(MINUTES)]
            cron = ",".join(str(time.gmtime(m / 1000).tm_min) for m in minutes) + " * * * *"
            writer = Scheduler(engine, SchedulerConfig(node_id="admin"))
            writer.init()
            for i in range(TASKS):
                writer.register(TaskDefinition(id=f"work-{i:03d}", name=f"Work {i}", cron=cron))
            writer.close()
            deadline = time.monotonic() + 60 * MINUTES + 90
            while not all(_settled(engine, m) for m in minutes):
                assert time.monotonic() < deadline, {m: Counter(r.status for r in journal(engine, scheduled_minute=m))
                                                     for m in minutes}
                for proc in procs:
                    assert proc.poll() is None, f"a node exited: {proc.communicate()[1][-3000:]}"
                time.sleep(0.5)
        finally:
            stop_nodes(procs)
        for minute in minutes:
            rows = journal(engine, scheduled_minute=minute)
            became = Counter(f"{r.status}/{r.reason}" for r in rows)
            assert Counter(r.status for r in rows) == {"success": TASKS}, became
            shares = Counter(r.owner_node for r in rows)
            print(f"[galera] minute {minute}: shares {dict(shares)}")
            assert len(shares) == NODES, shares
        aborts = {i: {k: galera.status(i)[k] for k in ("wsrep_local_cert_failures", "wsrep_local_bf_aborts")}
                  for i in range(NODES)}
        print(f"[galera] certification failures and brute-force aborts per Galera node: {aborts}")
        ran = Counter(e[1] for e in effects_of(effects) if e[0] == "effect")
        assert len(ran) == TASKS * MINUTES and max(ran.values()) == 1
    finally:
        close_engine(engine)


def _settled(engine: object, minute: int) -> bool:
    rows = journal(engine, scheduled_minute=minute)  # type: ignore[arg-type]
    return len(rows) == TASKS and all(r.status not in ("running", "queued") for r in rows)
