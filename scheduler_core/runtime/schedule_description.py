"""A task's schedule described (``Scheduler.describe``): its next fire times, its last runs with
their outcome and duration, and the counters of what did not run -- missed minutes, occurrences
skipped because the slot was held, dropped because the buffer was full, waiting now -- and the
pauses its failures caused. The counters are the journal's, over its retention (``since_ms``), so
they match what the journal pages show; the pauses are the audit trail's."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.model import Execution
from scheduler_core.runtime.failure_pause import PAUSED_BY
from scheduler_core.runtime.task_operations import TaskOperations, TaskStateName
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.task_queries import ScheduleCounts
from scheduler_core.store.users import AuditRepository

NEXT_FIRES = 10
LAST_RUNS = 10


@dataclass(frozen=True)
class RecentRun:
    """One of the task's latest occurrences, as the journal holds it."""

    occurrence_id: str
    trigger: Trigger
    scheduled_minute: int | None
    status: ExecutionStatus
    reason: str | None
    started_at: int | None  # the first attempt's start (None: no attempt began)
    finished_at: int | None  # the last attempt's end (None: running, or no attempt)

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @classmethod
    def of(cls, execution: Execution) -> RecentRun:
        attempts = execution.attempts
        return cls(execution.occurrence_id, execution.trigger, execution.scheduled_minute, execution.status,
                   execution.reason, attempts[0].started_at if attempts else None,
                   attempts[-1].finished_at if attempts else None)


@dataclass(frozen=True)
class ScheduleDescription:
    task_id: str
    state: TaskStateName
    next_fire_times: list[int]  # unix ms, the calendar and the jitter applied ([] while disabled)
    last_runs: list[RecentRun]  # newest first
    counts: ScheduleCounts
    paused_by_failure: int  # pauses by pause_on_failure in the audit trail
    runs_counted: int  # scheduled runs started since it was created or enabled again (with a max_runs)
    runs_left: int | None  # before it disables itself (max_runs); None: no limit
    limit_reached_at: int | None  # when it disabled itself on reaching max_runs


def describe(ops: TaskOperations, audit: AuditRepository, task_id: str) -> ScheduleDescription:
    """``task_id``'s schedule described; TaskNotFoundError when there is no such task."""
    task = ops.get(task_id)
    state = ops.state(task_id)
    last = ops.occurrences(task_id, LAST_RUNS, team=task.team).rows  # its history in its team (docs/teams.md)
    counts = ops.schedule_counts(task_id, task.team)
    starts = [task.start_of(minute) for minute in ops.next_runs(task, NEXT_FIRES)]  # after jitter (O8)
    return ScheduleDescription(task.id, state.state, starts, [RecentRun.of(e) for e in last],
                               counts, audit.count(PAUSED_BY, "task.pause", task_id), task.runs_counted,
                               None if task.max_runs is None else max(0, task.max_runs - task.runs_counted),
                               task.limit_reached_at)
