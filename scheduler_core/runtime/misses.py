"""No silent misses: what becomes of occurrences that no node ran (docs/semantics.md, "Misses").

Two ways an occurrence goes unrun. The whole cluster was down: the first node to tick afterwards
sees the cluster's watermark (the last minute some node planned) behind, and journals the gap
(``plan_gap``: ``missed`` / ``no_node_running``, or catch-up runs by the task's policy). Or no live
node can run the task: the nodes that cannot watch its due occurrences (``CapabilityWatch``) and
journal them ``missed`` / ``no_capable_node`` once no live node able to run it is left.
Occurrence ids stay ``uuid5(task, minute)``, so a repeated or late scan never journals a minute twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler_core.cron import cron_occurrence_id, next_fire_ms
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.planner import DueOccurrence, minute_of
from scheduler_core.statuses import Trigger
from scheduler_core.store.alerts import AlertRepository
from scheduler_core.store.executions import ClaimRequest
from scheduler_core.store.handoff import Missed
from scheduler_core.task_policies import CatchupMode

if TYPE_CHECKING:
    from scheduler_core.runtime.context import RuntimeContext
    from scheduler_core.store import TickSnapshot

logger = logging.getLogger("scheduler_core.node")

MINUTE_MS = 60_000
ROWS_PER_TASK = 60  # missed rows one gap journals per task; the older minutes share one summary row
MAX_FIRES = 24 * 60 * 7  # cron evaluations per task and gap, at most (a week of minutes)
WATCH_LIMIT = 100_000  # occurrences a node watches for a capable node, at most


@dataclass(frozen=True)
class GapPlan:
    """What a node journals for a gap: ``missed`` rows, and ``catchup`` runs (queued, in order)."""

    missed: list[Missed] = field(default_factory=list)
    catchup: list[ClaimRequest] = field(default_factory=list)


def plan_gap(tasks: Iterable[TaskDefinition], first_minute: int, last_minute: int, now_ms: int,
             lookback_ms: int) -> GapPlan:
    """The occurrences due from ``first_minute`` through ``last_minute`` (UTC minute starts) that
    no node planned; at most ``lookback_ms`` back from ``now_ms``."""
    start = max(first_minute, minute_of(now_ms - lookback_ms))
    plan = GapPlan()
    schedules: dict[tuple[str, str], list[int]] = {}  # tasks sharing a schedule share its fire minutes
    for task in tasks:
        if not task.enabled or start > last_minute:
            continue
        key = (task.cron, task.timezone)
        if key not in schedules:
            schedules[key] = _fires(task, start, last_minute)
        fires = [minute for minute in schedules[key] if _was_due(task, minute)]
        run = _caught_up(task, fires, now_ms)
        plan.catchup.extend(_request(task, minute, Trigger.CATCHUP) for minute in run)
        plan.missed.extend(_missed_rows(task, [minute for minute in fires if minute not in set(run)]))
    return plan


class GapCheck:
    """Once a minute, after the tick's claims: journal the minutes no node planned since the
    cluster's watermark (the whole cluster was down), then move the watermark to this minute."""

    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self._planned_minute = 0  # the last minute this node advanced the cluster's watermark to

    def close(self, snapshot: TickSnapshot, tasks: Iterable[TaskDefinition]) -> None:
        current = minute_of(snapshot.now_ms)
        if current <= self._planned_minute:
            return
        through = snapshot.ticked_through
        if through and through < current - MINUTE_MS:
            plan = plan_gap(tasks, through + MINUTE_MS, current - MINUTE_MS, snapshot.now_ms,
                            self.ctx.config.missed_lookback_ms)
            self.ctx.handoff.journal_missed(plan.missed)
            self.ctx.handoff.enqueue(plan.catchup)
            AlertRepository(self.ctx.executions.engine).record_gap(through + MINUTE_MS, current - MINUTE_MS)
            logger.warning("node %s: no node planned %s minute(s) before this one; journaled %d missed, queued %d "
                           "catch-up run(s)", self.ctx.node_id, (current - through) // MINUTE_MS - 1,
                           len(plan.missed), len(plan.catchup))
        if through < current:
            self.ctx.tasks.advance_watermark(current)
        self._planned_minute = current


def _fires(task: TaskDefinition, start: int, last: int) -> list[int]:
    fires: list[int] = []
    minute = next_fire_ms(task.cron, task.timezone, start - 1)
    while minute <= last and len(fires) < MAX_FIRES:
        fires.append(minute)
        minute = next_fire_ms(task.cron, task.timezone, minute)
    return fires


def _was_due(task: TaskDefinition, minute: int) -> bool:
    """Not before the task existed, not outside its calendar, and not while it was paused."""
    if task.created_at is not None and minute < task.created_at:
        return False
    if not task.due_at(minute):
        return False
    pause = task.paused
    return pause is None or minute < pause.at or (pause.until is not None and minute >= pause.until)


def _caught_up(task: TaskDefinition, fires: list[int], now_ms: int) -> list[int]:
    """The missed minutes the task's catch-up policy runs now (inside its window)."""
    policy = task.catchup_policy
    inside = [minute for minute in fires if minute >= now_ms - policy.window_ms]
    if policy.policy == CatchupMode.ALL:
        return inside
    if policy.policy == CatchupMode.LATEST:
        return inside[-1:]
    return []


def _missed_rows(task: TaskDefinition, minutes: list[int], reason: str = "no_node_running") -> list[Missed]:
    """A row per minute; beyond ``ROWS_PER_TASK``, the oldest share one summary row."""
    if len(minutes) <= ROWS_PER_TASK:
        return [Missed(_request(task, minute, Trigger.CRON), reason) for minute in minutes]
    older, recent = minutes[:-(ROWS_PER_TASK - 1)], minutes[-(ROWS_PER_TASK - 1):]
    summary = Missed(_request(task, older[0], Trigger.CRON), reason, until=older[-1], count=len(older))
    return [summary, *(Missed(_request(task, minute, Trigger.CRON), reason) for minute in recent)]


def _request(task: TaskDefinition, minute: int, trigger: Trigger) -> ClaimRequest:
    return ClaimRequest(occurrence_id=cron_occurrence_id(task.id, minute), task_id=task.id,
                        task_revision=task.revision, trigger=trigger, max_attempts=task.max_attempts, token="",
                        scheduled_minute=minute)


class CapabilityWatch:
    """The due occurrences of tasks this node cannot run, until some node journals them -- or no
    live node can run them any more, and they are journaled ``missed`` (``no_capable_node``)."""

    def __init__(self, grace_s: float) -> None:
        self._grace_s = grace_s
        self._watched: dict[str, tuple[DueOccurrence, float]] = {}  # occurrence id -> (due, first seen)

    def __bool__(self) -> bool:
        return bool(self._watched)

    def add(self, due: Iterable[DueOccurrence]) -> None:
        now = time.monotonic()
        for occurrence in due:
            if len(self._watched) < WATCH_LIMIT:
                self._watched.setdefault(cron_occurrence_id(occurrence.task_id, occurrence.minute_ms),
                                         (occurrence, now))

    def settle(self, journaled: Callable[[list[str]], set[str]], task: Callable[[str], TaskDefinition | None],
               capable: Callable[[TaskDefinition], bool]) -> list[Missed]:
        """Forget what some node journaled; return what waited its grace with no capable node
        (the caller journals them) and forget those too."""
        for occurrence_id in journaled(list(self._watched)):
            self._watched.pop(occurrence_id, None)
        ripe = time.monotonic() - self._grace_s
        missed = []
        for occurrence_id, (due, seen) in list(self._watched.items()):
            definition = task(due.task_id)
            if definition is None or not definition.enabled:
                del self._watched[occurrence_id]
            elif seen <= ripe and not capable(definition):
                missed.append(Missed(_request(definition, due.minute_ms, Trigger.CRON), "no_capable_node"))
                del self._watched[occurrence_id]
        return missed
