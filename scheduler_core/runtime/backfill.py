"""Backfill: an operator runs a task's past cron occurrences over a range of time (docs/semantics.md S11).

The range's fire minutes are the task's own: its cron in its time zone (a DST change as the
planner sees it) and its calendar (an excluded or out-of-window minute is no occurrence). Each
is journaled with its minute's cron occurrence id, trigger ``backfill``, ``queued``, and runs
as a catch-up run does: one at a time through the task's slot, in minute order, on any node able
to run the task. A minute that ran, runs or waits already is left as it is (never run twice); one
journaled ``missed`` or ``skipped`` never ran, so it is queued now (``journal.backfill``). A dry
run says how many fire times the range holds, the first and the last, and how many would be
queued, and changes nothing. At most ``BACKFILL_MAX`` fire times a call; the range must be past
(before the current minute, by the database clock). Audited as ``task.backfill``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler_core.cron import MINUTE_MS, cron_occurrence_id, random_id
from scheduler_core.errors import ConfigError, TaskNotFoundError
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store import ClaimRequest
from scheduler_core.validation import check_bool, check_id, check_ms, check_optional_id, check_optional_text, fail

BACKFILL_MAX = 1_000  # fire times one call may queue
REASON_MAX = 500  # characters of the reason the audit line keeps
_CHUNK = 64  # fire times computed a step
_AGAIN = (ExecutionStatus.MISSED, ExecutionStatus.SKIPPED)


@dataclass(frozen=True)
class BackfillResult:
    """What a backfill found in its range, and what it did (a dry run: what it would do)."""

    task_id: str
    count: int  # fire times in the range
    first_ms: int | None  # the first and the last of them (None: none)
    last_ms: int | None
    new: int  # not journaled yet: queued (a dry run: would be)
    again: int  # journaled missed or skipped, never run: queued again (a dry run: would be)
    already: int  # ran, runs or waits already (or a summary of missed minutes): left as they are
    dry_run: bool

    @property
    def queued(self) -> int:
        """Occurrences queued by this call (0 on a dry run)."""
        return 0 if self.dry_run else self.new + self.again


def iso(ms: int) -> str:
    """``ms`` as ISO 8601 in UTC; beyond the year 9999 (a unix ms can say it), as ms."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"


def check_range(start_ms: object, end_ms: object, now_ms: int) -> tuple[int, int]:
    """The range as given, checked: unix ms, start not after end, end before the current minute."""
    start = check_ms(start_ms, "start_ms")
    end = check_ms(end_ms, "end_ms")
    if start > end:
        fail(ConfigError, "end_ms", f"is before the range's start ({iso(end)} < {iso(start)}): the range is reversed")
    current = now_ms - now_ms % MINUTE_MS
    if end >= current:
        fail(ConfigError, "end_ms", f"is not in the past ({iso(end)}): a backfill runs minutes before the current "
                                    f"one ({iso(current)} by the database clock); the scheduler runs the rest")
    return start, end


def fire_minutes(task: TaskDefinition, start_ms: int, end_ms: int, limit: int) -> list[int]:
    """The task's fire minutes from ``start_ms`` through ``end_ms`` (its cron, zone and calendar),
    at most ``limit``."""
    found: list[int] = []
    after = start_ms - 1
    while len(found) < limit:
        chunk = [m for m in task.upcoming(after, _CHUNK) if m <= end_ms]
        found.extend(chunk[:limit - len(found)])
        if len(chunk) < _CHUNK:
            break
        after = chunk[-1]
    return found


def backfill(ctx: RuntimeContext, task_id: object, start_ms: object, end_ms: object, *, by: object,
             reason: object = None, dry_run: object = False) -> BackfillResult:
    """Queue ``task_id``'s fire minutes in the range as ``backfill`` runs (see the module's docstring)."""
    task_id = check_id(task_id, "task_id")
    actor = check_optional_id(by, "by") or "scheduler"
    blank = isinstance(reason, str) and not reason.strip()  # a form's empty field: no reason
    why = None if blank else check_optional_text(reason, "reason", REASON_MAX)
    dry = check_bool(dry_run, "dry_run")
    now = ctx.tasks.tick_snapshot().now_ms
    start, end = check_range(start_ms, end_ms, now)
    task = ctx.tasks.get(task_id)
    if task is None:
        raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
    minutes = fire_minutes(task, start, end, BACKFILL_MAX + 1)
    if len(minutes) > BACKFILL_MAX:
        fail(ConfigError, "end_ms", f"makes the range hold more than {BACKFILL_MAX} fire times of task {task_id!r} "
                                    f"(fire time {BACKFILL_MAX + 1} is {iso(minutes[-1])}): backfill at most "
                                    f"{BACKFILL_MAX} at a time")
    requests = [ClaimRequest(occurrence_id=cron_occurrence_id(task.id, m), task_id=task.id,
                             task_revision=task.revision, trigger=Trigger.BACKFILL, max_attempts=task.max_attempts,
                             token=random_id(), source=actor, scheduled_minute=m) for m in minutes]
    first, last = (minutes[0], minutes[-1]) if minutes else (None, None)
    if dry or not requests:
        found = ctx.handoff.journaled([r.occurrence_id for r in requests])
        again = sum(1 for status, summary in found.values() if status in _AGAIN and not summary)
        return BackfillResult(task.id, len(minutes), first, last, len(requests) - len(found), again,
                              len(found) - again, dry)
    done = ctx.handoff.backfill(requests, actor, task.id, {"from": iso(start), "to": iso(end), "fire_times":
                                                           len(minutes)}, why)
    return BackfillResult(task.id, len(minutes), first, last, len(done.new), len(done.again), len(done.already),
                          False)
