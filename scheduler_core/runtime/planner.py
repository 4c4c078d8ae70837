"""Which cron occurrences are due, without evaluating every expression on every tick.

Each enabled task keeps its next fire minute in a heap; a tick pops only what is due.
A delayed tick checks the current minute once (missed minutes are not backfilled), and
an occurrence seen but not yet journaled (node at capacity) stays in the backlog until some
node journals it -- every occurrence a live node saw ends with exactly one journal row.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from scheduler_core.cron import fires_at, next_fire_ms
from scheduler_core.model import TaskDefinition

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
        self.backlog: deque[DueOccurrence] = deque()

    def sync(self, tasks: dict[str, TaskDefinition], now_ms: int) -> None:
        """Adopt a new set of definitions; (re)plan the tasks that are new or changed."""
        current = minute_of(now_ms)
        changed = [t for t in tasks.values() if self._tasks.get(t.id) is None
                   or self._tasks[t.id].revision != t.revision]
        self._tasks = dict(tasks)
        for task in changed:
            if task.enabled:
                # From the minute before the current one: the current minute still counts.
                first = next_fire_ms(task.cron, task.timezone, current - 1)
                heapq.heappush(self._heap, (first, task.id, task.revision))

    def due(self, now_ms: int) -> list[DueOccurrence]:
        """Occurrences due at the current minute (popped; re-planned for their next fire)."""
        current = minute_of(now_ms)
        found: list[DueOccurrence] = []
        while self._heap and self._heap[0][0] <= current:
            fire, task_id, revision = heapq.heappop(self._heap)
            task = self._tasks.get(task_id)
            if task is None or task.revision != revision or not task.enabled:
                continue  # stale entry: the task changed or went away
            if fire == current or fires_at(task.cron, task.timezone, current):
                found.append(DueOccurrence(task_id, current, revision))
            heapq.heappush(self._heap, (next_fire_ms(task.cron, task.timezone, current), task_id, revision))
        return found

    def task(self, task_id: str) -> TaskDefinition | None:
        """The definition the planner knows for ``task_id`` (the node's last refresh)."""
        return self._tasks.get(task_id)

    def next_fire(self) -> int | None:
        return self._heap[0][0] if self._heap else None
