"""Building journal situations directly through the repositories (a "ghost" owner)."""

from __future__ import annotations

import time
import uuid

from sqlalchemy.engine import Engine

from scheduler_core import Scheduler
from scheduler_core.cron import new_occurrence_id
from scheduler_core.model import Attempt, Execution
from scheduler_core.store import ClaimRequest, ExecutionRepository


def abandon_running_execution(engine: Engine, task_id: str, started: bool, lease_ms: int = 1000,
                              max_attempts: int = 1) -> str:
    """Claim a manual occurrence as node "ghost" (lease ``lease_ms``), optionally begin an
    attempt, and walk away -- as a process that died would."""
    ghost = ExecutionRepository(engine, "ghost", lease_ms)
    token = str(uuid.uuid4())
    occurrence = new_occurrence_id()
    (result,) = ghost.claim([ClaimRequest(occurrence, task_id, 1, "manual", max_attempts, token)])
    assert result.outcome == "claimed", result
    if started:
        attempt = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id="ghost", started_at=1)
        assert ghost.begin_attempt(occurrence, token, [attempt])
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
