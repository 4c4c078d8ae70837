"""Pause on failure: a task with ``pause_on_failure = N`` is paused once N of its scheduled runs
in a row (cron, catch-up; manual and backfill runs do not count) of one revision have ended ``failed`` --
retries spent, as a failed run's status is final. Any change of the task (an edit, a resume) is a
new revision, so the count starts again. Checked by the node whose run just failed, after its terminal
commit; the pause names the reason and the last occurrence, is audited (actor ``scheduler``),
and raises the ``task.paused`` alert (reach/alert_detectors.py). docs/semantics.md R6a."""

from __future__ import annotations

import logging
import threading

from scheduler_core.model import Execution, TaskDefinition
from scheduler_core.statuses import SCHEDULED_TRIGGERS, ExecutionStatus
from scheduler_core.store.executions import ExecutionRepository
from scheduler_core.store.tasks import TaskRepository
from scheduler_core.store.users import AuditRepository

logger = logging.getLogger(__name__)
PAUSED_BY = "scheduler"  # the pause's ``by`` and the audit entry's actor


def failure_reason(count: int, occurrence_id: str) -> str:
    return f"failed {count} times in a row (last: {occurrence_id})"


def pause_if_failing(tasks: TaskRepository, executions: ExecutionRepository, task: TaskDefinition,
                     execution: Execution, now_ms: int) -> bool:
    """After ``execution`` of ``task`` ended ``failed``: pause the task if its last
    ``pause_on_failure`` scheduled runs all failed (and it is not paused already). True if paused."""
    count = task.pause_on_failure
    if (not count or execution.trigger not in SCHEDULED_TRIGGERS
            or (task.paused is not None and task.paused.active(now_ms))):
        return False
    last = executions.last_outcomes(task.id, execution.task_revision, count)
    if len(last) < count or any(status != ExecutionStatus.FAILED for status in last):
        return False
    reason = failure_reason(count, execution.occurrence_id)
    paused = tasks.pause(task.id, None, PAUSED_BY, reason)
    if paused is None:  # deleted meanwhile
        return False
    logger.warning("task %s paused: %s", task.id, reason)
    try:
        AuditRepository(tasks.engine).record(PAUSED_BY, "task.pause", task.id, after={"paused_by": PAUSED_BY},
                                             reason=reason)
    except Exception:  # the pause itself says who and why; the audit line is its echo
        logger.warning("auditing the pause of %s failed", task.id, exc_info=True)
    return True


def pause_soon_if_failing(tasks: TaskRepository, executions: ExecutionRepository, task: TaskDefinition,
                          execution: Execution, now_ms: int) -> None:
    """``pause_if_failing`` on a thread of its own: the caller is the group commit's callback,
    which must not wait for the database (it may be failing over)."""
    def check() -> None:
        try:
            pause_if_failing(tasks, executions, task, execution, now_ms)
        except Exception:
            logger.warning("pause on failure: checking %s failed", task.id, exc_info=True)

    threading.Thread(target=check, daemon=True, name=f"hai-failure-pause-{task.id[:16]}").start()
