"""The timeline: when each enabled task fires over a window ahead (1, 6 or 24 hours), by node
group, as a row of buckets per task -- the dashboard's ``/timeline/`` draws it.

A bucket is a slice of the window (48 of 30 minutes for a day, 72 of 5 minutes for 6 hours, 60
of one minute for an hour) and says what the task's fire times in it do: ``runs`` (at least one
fire time the task will run), ``paused`` (its fires fall in an active pause), ``excluded`` (its
fires are all excluded by the task's calendar: exclusions or active window), or nothing.

Cost: at most two cron evaluations per bucket that holds a fire time, per distinct schedule (cron,
zone, calendar): tasks that share a schedule share its buckets, so 10,000 tasks on a few
schedules cost a few schedules, and a page shows ``PAGE_ROWS`` tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from scheduler_core.cron import next_fire_ms
from scheduler_core.errors import ConfigError
from scheduler_core.model import TaskDefinition
from scheduler_core.validation import check_int, check_ms, fail

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
WINDOWS = {1: MINUTE_MS, 6: 5 * MINUTE_MS, 24: 30 * MINUTE_MS}  # hours -> bucket length
AHEAD_MAX_MS = 7 * 24 * HOUR_MS  # how far ahead a window may start
PAGE_ROWS = 25
NO_GROUP = "-"  # the group filter's value for tasks that run on any node
SEARCH_MAX = 200


class Mark(StrEnum):
    NONE = ""
    RUNS = "runs"
    PAUSED = "paused"
    EXCLUDED = "excluded"


@dataclass(frozen=True)
class TimelineRow:
    task: TaskDefinition
    marks: tuple[Mark, ...]  # one per bucket
    next_fire_ms: int | None  # the first fire time in the window the task runs (None: none)

    @property
    def runs(self) -> int:
        return sum(1 for mark in self.marks if mark == Mark.RUNS)


@dataclass(frozen=True)
class Timeline:
    start_ms: int
    hours: int
    bucket_ms: int
    rows: list[TimelineRow]  # this page's tasks, by node group then id
    groups: list[str]  # every node group of the enabled tasks ("" for any node), sorted
    matched: int  # enabled tasks that match the filters
    page: int  # 1-based
    pages: int
    disabled: int  # tasks left out because they are disabled

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.hours * HOUR_MS

    @property
    def buckets(self) -> int:
        return self.hours * HOUR_MS // self.bucket_ms

    @property
    def by_group(self) -> list[tuple[str, list[TimelineRow]]]:
        """The rows under their node group ("" for any node), in order."""
        return [(group, list(rows)) for group, rows in itertools.groupby(self.rows, lambda r: r.task.node_group or "")]


def check_window(hours: object, start_ms: object, now_ms: int) -> tuple[int, int]:
    """The window's length in hours (1, 6 or 24) and its start: from the current minute (by the DB
    clock; a start up to one bucket of the day's window before it is taken as now) to 7 days
    ahead, floored to its bucket; ``None`` start: now."""
    if isinstance(hours, bool) or hours not in WINDOWS:
        fail(ConfigError, "hours", f"must be one of {', '.join(map(str, WINDOWS))} (got {hours!r})")
    assert isinstance(hours, int)
    bucket = WINDOWS[hours]
    current = now_ms - now_ms % MINUTE_MS
    start = current if start_ms is None else check_ms(start_ms, "start")
    if not current - max(WINDOWS.values()) <= start <= current + AHEAD_MAX_MS:
        fail(ConfigError, "start", "must be from now to 7 days ahead: the timeline shows what is to come (the "
                                   "run history shows what was)")
    start = max(start, current)  # a window's start a zoom link names, passed meanwhile: now
    return hours, start - start % bucket


def timeline(tasks: Iterable[TaskDefinition], now_ms: int, *, hours: object = 24, start_ms: object = None,
             group: object = None, search: object = "", page: object = 1) -> Timeline:
    """One page of the timeline of ``tasks`` (see the module's docstring); filters: ``group``
    (a node group, ``NO_GROUP`` for tasks on any node, None for all) and ``search`` (words in the
    task's id or name)."""
    span, start = check_window(hours, start_ms, now_ms)
    bucket = WINDOWS[span]
    if group is not None and not isinstance(group, str):
        fail(ConfigError, "group", "must be a node group's name")
    if not isinstance(search, str) or len(search) > SEARCH_MAX:
        fail(ConfigError, "q", f"must be text of at most {SEARCH_MAX} characters")
    number = check_int(page, "page", 1, 1_000_000)
    every = list(tasks)
    enabled = [t for t in every if t.enabled]
    words = search.lower().split()
    matched = sorted((t for t in enabled if _in_group(t, group) and all(w in f"{t.id} {t.name}".lower()
                                                                       for w in words)),
                     key=lambda t: (t.node_group or "", t.id))
    pages = max(1, -(-len(matched) // PAGE_ROWS))
    if number > pages:
        fail(ConfigError, "page", f"must be at most {pages} (the last page)")
    shown = matched[(number - 1) * PAGE_ROWS: number * PAGE_ROWS]
    cache: dict[tuple[str, str, str], tuple[tuple[Mark, ...], int | None]] = {}
    rows = []
    for task in shown:
        key = (task.cron, task.timezone, repr(task.calendar))
        if key not in cache:
            cache[key] = _marks(task, start, bucket, span * HOUR_MS // bucket, max(start, now_ms - now_ms % MINUTE_MS))
        marks, first = cache[key]
        rows.append(_paused(task, marks, first, start, bucket))
    groups = sorted({t.node_group or "" for t in enabled})
    return Timeline(start, span, bucket, rows, groups, len(matched), number, pages, len(every) - len(enabled))


def _in_group(task: TaskDefinition, group: object) -> bool:
    if group is None or group == "":
        return True
    if group == NO_GROUP:
        return task.node_group is None
    return task.node_group == group


def _marks(task: TaskDefinition, start: int, bucket: int, count: int,
           from_ms: int) -> tuple[tuple[Mark, ...], int | None]:
    """The buckets of the task's schedule (cron, zone, calendar; not its pause) from ``from_ms``
    (the current minute, inside the first bucket) and its first fire time the calendar lets run.
    Two cursors move forward only: the next fire time the
    calendar allows and the next fire time of the cron alone; a bucket holding the first is
    ``runs``, else one holding the second is ``excluded``."""
    marks = [Mark.NONE] * count
    end = start + count * bucket
    due = _next_due(task, from_ms - 1, end)
    raw = next_fire_ms(task.cron, task.timezone, from_ms - 1)
    first = due
    for index in range(count):
        high = start + (index + 1) * bucket
        if due is not None and due < high:
            marks[index] = Mark.RUNS
            due = _next_due(task, high - 1, end)
        elif raw < high:
            marks[index] = Mark.EXCLUDED
        if raw < high:
            raw = next_fire_ms(task.cron, task.timezone, max(raw, high - 1))
        if due is None and raw >= end:
            break
    return tuple(marks), first


def _next_due(task: TaskDefinition, after: int, end: int) -> int | None:
    """The task's next fire time after ``after`` that its calendar lets run, if before ``end``."""
    if task.calendar is None:
        found = next_fire_ms(task.cron, task.timezone, after)
    else:
        upcoming = task.upcoming(after, 1)  # the calendar passes excluded days and hours over at once
        found = upcoming[0] if upcoming else end
    return found if found < end else None


def _paused(task: TaskDefinition, marks: tuple[Mark, ...], first: int | None, start: int,
            bucket: int) -> TimelineRow:
    """The row of ``task``: its schedule's buckets, those that end inside an active pause marked
    ``paused`` (a bucket the pause ends in still runs its later fire times)."""
    pause = task.paused
    if pause is None or first is None:
        return TimelineRow(task, marks, first)
    shown = tuple(Mark.PAUSED if mark == Mark.RUNS and pause.active(start + (i + 1) * bucket - 1) else mark
                  for i, mark in enumerate(marks))
    if not pause.active(first):
        return TimelineRow(task, shown, first)
    end = start + len(marks) * bucket
    after = None if pause.until is None else _next_due(task, max(first, pause.until - 1), end)
    return TimelineRow(task, shown, after)
