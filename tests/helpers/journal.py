"""Building journal situations directly through the repositories (a "ghost" owner)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler
from scheduler_core.cron import new_occurrence_id
from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions, slots
from scheduler_core.model import Attempt, Execution
from scheduler_core.store import ClaimRequest, ExecutionRepository
from scheduler_core.testing import clock_offset, set_clock_offset


def abandon_running_execution(engine: Engine, task_id: str, started: bool, lease_ms: int = 1000,
                              max_attempts: int = 1) -> str:
    """Claim a manual occurrence as node "ghost", optionally begin an attempt, and walk away --
    as a process that died would -- leaving a lease that expires ``lease_ms`` from now.

    The claim and the begin hold a long lease, shortened afterwards: on a loaded host more than
    a short lease can pass between the two, and the begin would then (rightly) be refused."""
    ghost = ExecutionRepository(engine, "ghost", 120_000)
    token = str(uuid.uuid4())
    occurrence = new_occurrence_id()
    (result,) = ghost.claim([ClaimRequest(occurrence, task_id, 1, "manual", max_attempts, token)])
    assert result.outcome == "claimed", result
    if started:
        attempt = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id="ghost", started_at=1)
        assert ghost.begin_attempt(occurrence, token, [attempt])
    with engine.begin() as conn:
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrence)
                     .values(lease_until=db_now_ms() + lease_ms))
    return occurrence


def wait_for_status(scheduler: Scheduler, occurrence_id: str, status: str, timeout: float = 20) -> Execution:
    deadline = time.monotonic() + timeout
    while True:
        execution = scheduler.execution.get(occurrence_id)
        if execution.status == status:
            return execution
        if time.monotonic() > deadline:
            raise AssertionError(f"{occurrence_id} is {execution.status}, expected {status}")
        time.sleep(0.1)


# --- rows for list pages (journal, logs) ------------------------------------------------


def wait_for_first_tick(scheduler: Scheduler, timeout: float = 10) -> None:
    """Until the started ``scheduler``'s node has ticked once (read the tasks version)."""
    deadline = time.monotonic() + timeout
    while scheduler._node is None or scheduler._node._tasks_version is None:
        assert time.monotonic() < deadline, "the first tick did not run"
        time.sleep(0.02)


def journal_pending(engine: Engine, count: int, status: str = "failed", started_at: int = 1_000,
                    prefix: str = "pending") -> list[str]:
    """Journal ``count`` finished executions whose logs were never projected (``pending``),
    through the engine's own write path, as a node whose log writes failed would leave them.
    Each has its own task (one slot each) and one attempt."""
    ghost = ExecutionRepository(engine, "ghost", 60_000)
    requests = [ClaimRequest(str(uuid.uuid4()), f"{prefix}-{i:04d}", 1, "manual", 1, str(uuid.uuid4()),
                             source="test") for i in range(count)]
    assert all(r.outcome == "claimed" for r in ghost.claim(requests))
    for request in requests:
        attempt = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id="ghost", started_at=started_at,
                          finished_at=started_at + 5, status=status, error="boom" if status == "failed" else None)
        execution = ghost.get(request.occurrence_id)
        assert execution is not None
        assert ghost.finish(execution, request.token, status, None, [attempt], release_slot=True)
    return [r.occurrence_id for r in requests]


def execution_row(occurrence_id: str, created_at: int, status: str = "success", task_id: str = "t",
                  log_persistence: str | None = None) -> dict[str, Any]:
    return {"occurrence_id": occurrence_id, "task_id": task_id, "task_revision": 1, "trigger": "manual",
            "status": status, "sequence": 1, "attempt": 1, "max_attempts": 1, "attempts": [],
            "log_persistence": log_persistence, "created_at": created_at, "updated_at": created_at}


def log_row(log_id: str, started_at: int, status: str = "success", task_id: str = "t",
            source: str | None = None) -> dict[str, Any]:
    return {"id": log_id, "occurrence_id": f"occ-{log_id}", "task_id": task_id, "trigger": "manual",
            "source": source, "status": status, "sequence": 1, "attempt": 1, "node_id": "n",
            "started_at": started_at, "finished_at": started_at + 1, "duration_ms": 1, "error": None,
            "result": None, "created_at": started_at}


def insert_rows(engine: Engine, table: Any, rows: Iterable[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(insert(table), list(rows))


def db_now(engine: Engine) -> int:
    with engine.connect() as conn:
        now = int(conn.execute(select(db_now_ms())).scalar_one())
        conn.rollback()
    return now


def enter_minute(engine: Engine, seconds_into: float = 5.0) -> int:
    """Raise ``engine``'s clock offset so that DB time is ``seconds_into`` the next minute;
    returns that minute's start (ms). The offset only grows: nothing journaled before is
    seen as written in the future. Tests that count cron occurrences start this way."""
    now = db_now(engine)
    target = now - now % 60_000 + 60_000
    set_clock_offset(engine, clock_offset(engine) + target + int(seconds_into * 1000) - now)
    return target


def slot_holder(engine: Engine, task_id: str) -> str | None:
    """The occurrence holding a task's slot (None: free, or no slot row)."""
    with engine.connect() as conn:
        holder = conn.execute(select(slots.c.occurrence_id).where(slots.c.task_id == task_id)).scalar()
        conn.rollback()
    return holder
