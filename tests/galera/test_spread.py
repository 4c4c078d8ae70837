"""Three scheduler nodes, each writing to a *different* Galera node, and the dashboard on a third
(issue #33, part 1: find out).

The multi-node spread scenario of tests/multinode/test_spread.py on the cluster: 60 tasks due in
each of two minutes, handlers of 1-4 s, one scheduler node per Galera node. Row locks are taken
on one Galera node only; a conflicting write elsewhere is found at COMMIT by certification and
aborted (1213). Judged as on one server: every occurrence journaled once and run once, nothing
skipped, every node a share of each minute. Meanwhile the dashboard (``hai-scheduler serve``, two
gunicorn workers, writing through Galera node 3) is asked twice, through its API, to run a task
now with one Idempotency-Key: one occurrence, run once by a node that can run it.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from sqlalchemy import select
from sqlalchemy.engine import Engine
from werkzeug.security import generate_password_hash

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import executions
from scheduler_core.runtime.accounts import Accounts
from scheduler_core.runtime.api_tokens import ApiTokens
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
from tests.helpers.served import serve

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
                   "max_seconds": 60 * MINUTES + 300,
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
            with serve(tmp_path, {"HAI_DATABASE_URL": galera.url(2), "HAI_ADMIN_PASSWORD": "galera admin pw",
                                  "HAI_THREADS": "2", **env}) as base:
                token = {"Authorization": f"Bearer {_token(engine)}"}
                asked = [requests.post(f"{base}/api/v1/tasks/trigger/work-000", headers=token, timeout=30,
                                       json={"idempotency_key": "galera-dashboard"}) for _ in range(2)]
                assert [a.status_code for a in asked] == [202, 202], [a.text for a in asked]
                manual = {a.json()["occurrence_id"] for a in asked}
                assert len(manual) == 1 and [a.json()["existing"] for a in asked] == [False, True], asked
                assert requests.get(f"{base}/healthz", timeout=10).status_code == 200
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
        assert len(ran) == TASKS * MINUTES + 1 and max(ran.values()) == 1, ran.most_common(3)
        (occurrence,) = manual
        assert ran[occurrence] == 1 and _status(engine, occurrence) == "success"
    finally:
        close_engine(engine)


def _token(engine: Engine) -> str:
    accounts, tokens = Accounts(engine), ApiTokens(engine)
    accounts.create("galera-operator", "operator", generate_password_hash("galera operator pw"))
    return tokens.create("galera-operator", "galera").secret


def _status(engine: Engine, occurrence_id: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(select(executions.c.status)
                                .where(executions.c.occurrence_id == occurrence_id)).scalar_one())


def _settled(engine: object, minute: int) -> bool:
    rows = journal(engine, scheduled_minute=minute)  # type: ignore[arg-type]
    return len(rows) == TASKS and all(r.status not in ("running", "queued") for r in rows)
