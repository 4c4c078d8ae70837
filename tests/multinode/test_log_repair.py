"""Log repair from other processes: never runs business code; concurrent repairs write once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db.tables import logs
from tests.conftest import TestDatabase
from tests.helpers.processes import spawn_helper


def test_repair_from_two_other_processes(database: TestDatabase, engine: Engine, tmp_path: Path) -> None:
    scheduler = Scheduler(engine, SchedulerConfig(node_id="origin"))
    scheduler.init()
    try:
        scheduler.register(TaskDefinition(id="job", name="Job", cron="0 2 * * *", idempotent=True,
                                          retry={"max_attempts": 2}))
        calls: list[int] = []

        def fail_once(event: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("first try fails")
            return {"done": True}

        scheduler.set_hooks({"on_task_execute": fail_once})
        with engine.begin() as conn:  # make the projection fail: the log table is away
            conn.execute(text("ALTER TABLE logs RENAME TO logs_away"))
        try:
            log = scheduler.trigger("job")
        finally:
            with engine.begin() as conn:
                conn.execute(text("ALTER TABLE logs_away RENAME TO logs"))
    finally:
        scheduler.close()
    assert (log.status, log.attempt, log.persistence.status) == ("success", 2, "pending")

    calls_file = tmp_path / "hook-calls.txt"
    procs = [spawn_helper("repair_process.py", database.url, log.occurrence_id, str(calls_file)) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["log_persistence"] for r in results] == ["persisted", "persisted"]
    assert sum(r["repaired"] for r in results) == 1  # exactly one of them wrote the projection
    assert not calls_file.exists(), "repair called a hook"
    with engine.connect() as conn:
        rows = conn.execute(select(logs.c.attempt, logs.c.status).order_by(logs.c.attempt)).all()
        total = conn.execute(select(func.count()).select_from(logs)).scalar_one()
        conn.rollback()
    assert total == 2 and [tuple(r) for r in rows] == [(1, "failed"), (2, "success")]
