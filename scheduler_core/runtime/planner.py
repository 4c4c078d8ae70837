"""Which cron occurrences are due, without evaluating every expression on every tick.

Each enabled task keeps its next fire minute in a heap; a tick pops only what is due, and
plans the popped tasks' next fire (``replan``) after it has claimed this minute's
occurrences: a burst of 10,000 due tasks is not held back by 10,000 cron evaluations.
A delayed tick checks the current minute once (missed minutes are not backfilled), and
an occurrence seen but not yet journaled (node at capacity) stays in the backlog until some
node journals it -- every occurrence a live node saw ends with exactly one journal row.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from scheduler_core.cron import fires_at, next_fire_ms
from scheduler_core.model import Execution, TaskDefinition
from scheduler_core.statuses import Trigger

MINUTE_MS = 60_000


def minute_of(ms: int) -> int:
    return ms - ms % MINUTE_MS


@dataclass(frozen=True)
class DueOccurrence:
    task_id: str
    minute_ms: int
    revision: int  # definition revision that made it due


class Planner:
    def __init__(self) -> None:
        self._heap: list[tuple[int, str, int]] = []  # (next fire minute, task id, revision)
        self._tasks: dict[str, TaskDefinition] = {}
        self._popped: list[tuple[str, int, int]] = []  # (task id, revision, minute) waiting for replan
        self.backlog: deque[DueOccurrence] = deque()

    def sync(self, tasks: dict[str, TaskDefinition], now_ms: int) -> None:
        """Adopt a new set of definitions; (re)plan the tasks that are new or changed."""
        current = minute_of(now_ms)
        changed = [t for t in tasks.values() if self._tasks.get(t.id) is None
                   or self._tasks[t.id].revision != t.revision]
        self._tasks = dict(tasks)
        next_fire = _memoized_next_fire()
        for task in changed:
            if task.enabled:
                # From the minute before the current one: the current minute still counts.
                heapq.heappush(self._heap, (next_fire(task, current - 1), task.id, task.revision))

    def due(self, now_ms: int) -> list[DueOccurrence]:
        """Occurrences due at the current minute (popped; ``replan`` plans their next fire)."""
        self.replan()  # anything a previous tick left: its next fire is before this minute's
        current = minute_of(now_ms)
        found: list[DueOccurrence] = []
        while self._heap and self._heap[0][0] <= current:
            fire, task_id, revision = heapq.heappop(self._heap)
            task = self._tasks.get(task_id)
            if task is None or task.revision != revision or not task.enabled:
                continue  # stale entry: the task changed or went away
            paused = task.paused is not None and task.paused.active(current)
            if not paused and (fire == current or fires_at(task.cron, task.timezone, current)) \
                    and task.due_at(current):  # outside its calendar: not due, no journal row
                found.append(DueOccurrence(task_id, current, revision))
            self._popped.append((task_id, revision, current))
        return found

    def replan(self) -> None:
        """Plan the next fire (after the minute they were popped at) of the tasks ``due`` popped."""
        popped, self._popped = self._popped, []
        next_fire = _memoized_next_fire()
        for task_id, revision, minute in popped:
            task = self._tasks.get(task_id)
            if task is not None and task.revision == revision and task.enabled:
                heapq.heappush(self._heap, (next_fire(task, minute), task_id, revision))

    def tasks(self) -> list[TaskDefinition]:
        """Every definition the planner knows (the node's last refresh)."""
        return list(self._tasks.values())

    def task(self, task_id: str) -> TaskDefinition | None:
        """The definition the planner knows for ``task_id`` (the node's last refresh)."""
        return self._tasks.get(task_id)

    def next_fire(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def planned_at(self, minute_ms: int, at_least: int) -> bool:
        """At least ``at_least`` tasks are planned to fire at ``minute_ms`` (stale entries of
        changed tasks count too: an estimate, for the garbage collector's timing)."""
        found = 0
        for fire, _, _ in self._heap:
            if fire == minute_ms:
                found += 1
                if found >= at_least:
                    return True
        return False


def _memoized_next_fire() -> Callable[[TaskDefinition, int], int]:
    """``next_fire_ms`` for one planning pass, computed once per (cron, timezone, after):
    tasks that share a schedule (a burst usually does) cost one evaluation."""
    known: dict[tuple[str, str, int], int] = {}

    def next_fire(task: TaskDefinition, after_ms: int) -> int:
        key = (task.cron, task.timezone, after_ms)
        found = known.get(key)
        if found is None:
            found = known[key] = next_fire_ms(task.cron, task.timezone, after_ms)
        return found

    return next_fire


def definition_problem(execution: Execution, task: TaskDefinition | Exception | None) -> str | None:
    """Why the stored definition no longer allows this execution to run, if it does not."""
    if isinstance(task, Exception):
        return "unreadable"
    if task is None:
        return "deleted"
    if execution.trigger == Trigger.CRON:
        # A task that disabled itself on reaching its max_runs let its last run go on: no other
        # run of it is seated after that (store/journal/run_limits.py).
        if not task.enabled and task.limit_reached_at is None:
            return "disabled"
        # The revision it was claimed at made it due (the planner checked); any change of
        # cron, timezone or calendar bumps the revision, so only a changed definition is asked again.
        if (execution.scheduled_minute is not None and task.revision != execution.task_revision
                and not (fires_at(task.cron, task.timezone, execution.scheduled_minute)
                         and task.due_at(execution.scheduled_minute))):
            return "rescheduled"
    return None
