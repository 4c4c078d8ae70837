"""Rows that stretch every page: long ids, long errors, long URLs, a wide audit diff.

Written straight into the served dashboard's database through the repositories (and, for the
journal and the logs, the tables' own rows), so that the screen-size, accessibility and
screenshot tests walk pages that hold the worst text an operator meets.
"""

from __future__ import annotations

import time
import uuid

from werkzeug.security import generate_password_hash

from scheduler_core import TaskDefinition
from scheduler_core.db import close_engine, create_engine
from scheduler_core.db.tables import executions, logs
from scheduler_core.reach import Reach
from scheduler_core.store import ExecutionRepository, TaskRepository
from scheduler_core.store.nodes import NodeRepository
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.store.users import AuditRepository, UserRepository
from tests.browser.conftest import Dashboard
from tests.helpers.journal import abandon_running_execution, db_now, execution_row, insert_rows, log_row

LONG_ID = "billing-nightly-export-for-the-customer-accounts-of-region-eu-central-1-" + "x" * 40
LONG_URL = "https://billing.internal.example.org/api/v2/exports/customer-accounts/eu-central-1/" + "a" * 120
LONG_ERROR = ("HTTPError: 502 Bad Gateway from https://billing.internal.example.org/api/v2/exports/"
              + "customer-accounts/eu-central-1/" + "b" * 200 + " " + "the upstream answered " * 20)
LONG_USER = "aaron-operations-on-call-engineer-night-shift-" + "y" * 12


def seed(dashboard: Dashboard) -> dict[str, str]:
    """Fill the dashboard's database; returns the ids the tests look for."""
    engine = create_engine(dashboard.database_url)
    try:
        tasks = TaskRepository(engine)
        tasks.insert(TaskDefinition(
            id=LONG_ID, name="Nightly billing export " * 4, cron="30 2 * * 1-5", timezone="Europe/Berlin",
            description="Exports every customer account. " * 10,
            handler={"kind": "api", "url": LONG_URL, "method": "POST",
                     "headers": {"Authorization": "Bearer seeded-secret", "X-Trace-Context": "z" * 150}},
            params={"accounts": ["acct-" + str(i) * 30 for i in range(5)]}))
        tasks.insert(TaskDefinition(id="charge_cards.2", name="Charge cards", cron="0 3 * * *",
                                    handler={"kind": "hook"}))
        now = db_now(engine)
        rows, journal = [], []
        for i in range(60):
            log = log_row(f"seed-log-{i:03d}", now - i * 60_000, status="failed" if i % 3 == 0 else "success",
                          task_id=LONG_ID, source="manual:" + LONG_USER)
            log.update(error=LONG_ERROR if i % 3 == 0 else None, node_id="node-" + "n" * 60, duration_ms=1234)
            rows.append(log)
            status = "failed" if i % 3 == 0 else "success"
            attempt = {"log_id": log["id"], "attempt": 1, "sequence": 1, "node_id": log["node_id"],
                       "started_at": now - i * 60_000, "finished_at": now - i * 60_000 + 400 + 97 * (i % 13),
                       "status": status}  # durations for the task page's chart
            journal.append({**execution_row(f"seed-occ-{i:03d}-" + "o" * 40, now - i * 60_000, status=status,
                                            task_id=LONG_ID), "attempts": [attempt]})
        insert_rows(engine, logs, rows)
        insert_rows(engine, executions, journal)
        unknown = abandon_running_execution(engine, "charge_cards.2", started=True, lease_ms=1000)
        NodeRepository(engine).heartbeat("worker-" + "w" * 70, "host-" + "h" * 70, 4242,
                                         capabilities=["api", "hook"], groups=["group-" + "g" * 50])
        users = UserRepository(engine)
        users.create(LONG_USER, "operator", generate_password_hash("seeded user pw"))
        audit = AuditRepository(engine)
        audit.record("admin", "task.update", LONG_ID,
                     before={"handler": {"url": LONG_URL, "headers": {"X-Trace-Context": "z" * 150}}},
                     after={"handler": {"url": LONG_URL + "/v3", "headers": {"X-Trace-Context": "q" * 150}}},
                     reason="Moved to the v3 export endpoint " * 8)
        reach = Reach(engine, dashboard.reach_config, node_id="browser-seed", auto_migrate=False)
        reach.init()
        try:
            template = "alert-text-for-the-billing-team-" + "t" * 30
            reach.templates.create(template, "webhook", "{summary} -- {link} " + "long template body " * 20)
            reach.alerts.save_rule({"name": "billing-failures-" + "r" * 40, "events": ["execution.failed"],
                                    "template": template, "to": "ops-channel-" + "c" * 60, "tasks": LONG_ID})
            dead = str(uuid.uuid4())
            QueueRepository(engine, "browser-seed", 30_000).enqueue(
                dead, "webhook", None, "ops-channel-" + "c" * 60, "Disk almost full " * 5, LONG_ERROR, {},
                (1, 1_000, 4_000), None)
            deadline = time.monotonic() + 30
            while (entry := reach.queue.get(dead)) is None or entry.status != "dead":
                assert time.monotonic() < deadline, f"not dead: {entry}"
                reach.run_round()  # the webhook answers 400: dead at once
                time.sleep(0.2)
        finally:
            reach.close()
        repo = ExecutionRepository(engine, "browser-seed", 1000)
        deadline = time.monotonic() + 60
        while (execution := repo.get(unknown)) is None or execution.status != "unknown":
            assert time.monotonic() < deadline, f"not isolated: {execution}"
            time.sleep(0.2)
        return {"task": LONG_ID, "unknown": unknown, "dead": dead, "user": LONG_USER}
    finally:
        close_engine(engine)
