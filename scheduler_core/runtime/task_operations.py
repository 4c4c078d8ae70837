"""The task pages' operator API: ``scheduler.task_ops``.

Search (``status:failed kind:api enabled:false tz:Europe/Berlin team:ops nightly``), the task list
with last outcomes and next run times, a task's history, cron previews, deletion with a
compare-and-set, and the round trip of masked secrets through an edit form. Every bad input
raises :class:`ConfigError` naming the field (or the search term) before anything is read
or written. Reads take the caller's ``Scope`` (docs/teams.md): a task of a team outside it is
not found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.cron import describe, dst_note, validate_cron, validate_timezone
from scheduler_core.errors import ConfigError, ConflictError, TaskNotFoundError
from scheduler_core.model import Execution, TaskDefinition
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.execution_operations import REASON_MAX, check_cursor
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.journal_queries import JournalQueries, RunCell
from scheduler_core.store.task_queries import NEVER_RUN, ScheduleCounts, StoredTask, TaskFilter, TaskQueries
from scheduler_core.task_policies import Calendar, Pause
from scheduler_core.validation import (
    ID_MAX,
    PAGE_LIMIT,
    check_id,
    check_int,
    check_ms,
    check_optional_id,
    check_optional_text,
    check_team,
    check_text,
)

SEARCH_FIELDS = ("status", "kind", "enabled", "tz", "team")
_FIELD_ALIASES = {"timezone": "tz"}
SEARCH_STATUSES = (*ExecutionStatus, NEVER_RUN)
MAX_QUERY = 500
PREVIEW_RUNS = 5
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
# A term is field:value (the value may be quoted), a quoted phrase, or a bare word.
_TERM = re.compile(r'([A-Za-z_]+):(?:"([^"]*)"|(\S*))|"([^"]*)"|(\S+)')


class TaskStateName(StrEnum):
    OK = "ok"
    PAUSED = "paused"
    DISABLED = "disabled"
    BLOCKED = "blocked"  # its slot is held by an unknown execution, or by a running one past its next fire


@dataclass(frozen=True)
class TaskRow:
    """One line of the task list."""

    id: str
    task: TaskDefinition | None  # None: the stored definition is unreadable (see problem)
    problem: str | None
    last: Execution | None  # the newest journal row, None if it never ran
    next_run_ms: int | None  # the next fire minute (DB clock); None: disabled, unreadable, its calendar ended
    state: TaskStateName | None = None  # ok / paused / disabled / blocked; None when unreadable
    blocked_by: Execution | None = None  # the execution holding the slot, when it blocks the task


@dataclass(frozen=True)
class TaskPage:
    rows: list[TaskRow]
    search: TaskFilter
    next_after: str | None  # cursor of the following page
    prev_before: str | None  # cursor of the preceding page
    now_ms: int  # the DB clock the next run times were computed from


@dataclass(frozen=True)
class GridRow:
    """One task of the run-history grid."""

    id: str
    task: TaskDefinition | None  # None: the stored definition is unreadable (see problem)
    problem: str | None
    runs: list[RunCell]  # its newest occurrences, oldest first (newest right)


@dataclass(frozen=True)
class RunGrid:
    rows: list[GridRow]
    search: TaskFilter
    runs: int  # the most occurrences a row shows
    next_after: str | None  # cursor of the following page of tasks
    prev_before: str | None  # cursor of the preceding page


@dataclass(frozen=True)
class OccurrencePage:
    rows: list[Execution]
    next_before: str | None  # cursor ("created_at.occurrence_id") of the older page
    any_running: bool


@dataclass(frozen=True)
class TaskState:
    """What an operator needs to know about a task at a glance."""

    state: TaskStateName
    blocked_by: str | None  # the occurrence id holding the slot, when blocked
    skipped_since: int  # occurrences journaled skipped since the blocking one began
    last_outcome: ExecutionStatus | None  # status of the newest journal row; None when it never ran
    paused: Pause | None  # who paused it, why, until when


@dataclass(frozen=True)
class CronPreview:
    cron: str  # normalised
    timezone: str
    description: str
    runs: list[int]  # the next fire minutes, UTC ms (the calendar applied, when one was given)
    notes: list[str | None]  # per run: how the DST rule placed it (cron.dst_note), None when no transition did
    calendar: Calendar | None = None  # the active window and exclusions the runs were read through


def parse_search(query: str | None) -> TaskFilter:
    """``status:failed kind:api enabled:false tz:Europe/Berlin nightly`` as a filter.

    Raises ConfigError(field="q") naming the offending term: an unknown field, a bad value,
    a field given twice. Free words (and quoted phrases) must all occur in id, name or
    description.
    """
    text = check_text(query or "", "q", MAX_QUERY, blank=True).strip()
    if text.count('"') % 2:
        raise ConfigError("q", "a quote (\") is not closed")
    terms: dict[str, str] = {}
    words: list[str] = []
    for match in _TERM.finditer(text):
        name, quoted, bare, phrase, word = match.groups()
        if name is None:
            value = phrase if phrase is not None else word
            if value.strip():
                words.append(value.strip())
            continue
        field = _FIELD_ALIASES.get(name.lower(), name.lower())
        if field not in SEARCH_FIELDS:
            raise ConfigError("q", f"unknown search field {name!r}: use {', '.join(f + ':' for f in SEARCH_FIELDS)} "
                                   "or plain words")
        if field in terms:
            raise ConfigError("q", f"{field}: is given twice")
        terms[field] = quoted if quoted is not None else bare
    return _filter(terms, tuple(words))


def _filter(terms: Mapping[str, str], words: tuple[str, ...]) -> TaskFilter:
    status = terms.get("status")
    if status is not None and status.lower() not in SEARCH_STATUSES:
        raise ConfigError("q", f"status: must be one of {', '.join(SEARCH_STATUSES)} (got {status!r})")
    enabled: bool | None = None
    if "enabled" in terms:
        value = terms["enabled"].lower()
        if value not in _TRUE + _FALSE:
            raise ConfigError("q", f"enabled: must be true or false (got {terms['enabled']!r})")
        enabled = value in _TRUE
    timezone = None
    if "tz" in terms:
        try:
            timezone = validate_timezone(terms["tz"]) if terms["tz"] else None
        except ConfigError as exc:
            raise ConfigError("q", f"tz: {_reason(exc)}") from None
        if timezone is None:
            raise ConfigError("q", "tz: give a time zone name, e.g. tz:Europe/Berlin")
    kind, team = terms.get("kind"), terms.get("team")
    if team is not None:
        try:
            check_team(team, "team")
        except ConfigError as exc:
            raise ConfigError("q", f"team: {_reason(exc)}") from None
    return TaskFilter(words=words, status=status.lower() if status else None,
                      kind=kind.lower() if kind is not None else None, enabled=enabled, timezone=timezone, team=team)


def _reason(exc: ConfigError) -> str:
    """The message of a ConfigError without its ``field: `` prefix."""
    return exc.message.removeprefix(f"{exc.field}: ")


class TaskOperations:
    """Reads for the task pages and the few writes that need more than ``Scheduler``'s API."""

    def __init__(self, context: Callable[[], RuntimeContext]) -> None:
        self._context = context  # the node's context; raises NOT_INITIALIZED before init()

    def _queries(self) -> TaskQueries:
        return TaskQueries(self._context().tasks.engine)

    def now_ms(self) -> int:
        """The database clock (one cheap statement)."""
        return self._context().tasks.tick_snapshot().now_ms

    # --- reads ------------------------------------------------------------------------

    def search(self, query: str | None = None, limit: int = 50, after: str | None = None,
               before: str | None = None, scope: Scope = EVERY_TEAM) -> TaskPage:
        """One page of the tasks in ``scope`` matching ``query``, with their last outcome and
        next run time.

        Four statements whatever the page: the DB clock, the page of tasks, the last journal
        row and the slot holder of exactly those tasks.
        """
        search, page, next_after, prev_before = self._task_page(query, limit, after, before, scope)
        queries = self._queries()
        now = self.now_ms()
        ids = [stored.id for stored in page]
        last, holders = queries.last_executions(ids), queries.slot_holders(ids)
        rows = [self._row(stored, last.get(stored.id), holders.get(stored.id), now) for stored in page]
        return TaskPage(rows, search, next_after, prev_before, now)

    def _task_page(self, query: str | None, limit: int, after: str | None, before: str | None,
                   scope: Scope) -> tuple[TaskFilter, list[StoredTask], str | None, str | None]:
        """One keyset page of the tasks in ``scope`` matching ``query`` (by id), with its neighbours' cursors."""
        search = replace(parse_search(query), scope=scope)
        if search.kind is not None and self._context().executors.get(search.kind) is None:
            raise ConfigError("q", f"kind: no handler kind {search.kind!r} (e.g. kind:api, kind:hook)")
        check_int(limit, "limit", 1, PAGE_LIMIT)
        check_optional_id(after, "after")
        check_optional_id(before, "before")
        found = self._queries().search(search, limit + 1, after=None if before else after, before=before)
        more = len(found) > limit
        page = (found[1:] if before is not None else found[:limit]) if more else found
        forward = before is None
        next_after = page[-1].id if page and (more or not forward) else None
        prev_before = page[0].id if page and ((forward and after is not None) or (not forward and more)) else None
        return search, page, next_after, prev_before

    def grid(self, query: str | None = None, limit: int = 50, runs: int = 20, after: str | None = None,
             before: str | None = None, scope: Scope = EVERY_TEAM) -> RunGrid:
        """The run-history grid: a keyset page of the tasks in ``scope`` matching ``query`` (the
        Tasks page's search) and the newest ``runs`` occurrences of each, oldest first. Two
        statements: the page of tasks, and one bounded read of their runs (``JournalQueries.recent_runs``)."""
        check_int(runs, "runs", 1, 100)
        search, page, next_after, prev_before = self._task_page(query, limit, after, before, scope)
        cells = JournalQueries(self._context().tasks.engine).recent_runs([stored.id for stored in page], runs)
        rows = [GridRow(stored.id, stored.task, stored.problem, cells.get(stored.id, [])) for stored in page]
        return RunGrid(rows, search, runs, next_after, prev_before)

    @staticmethod
    def _row(stored: StoredTask, last: Execution | None, holder: Execution | None, now: int) -> TaskRow:
        task = stored.task
        if task is None:
            return TaskRow(stored.id, None, stored.problem, last, None)
        nexts = task.upcoming(now, 1) if task.enabled else []
        next_run = nexts[0] if nexts else None
        blocked = holder is not None and blocks(task, holder, now)
        return TaskRow(stored.id, task, stored.problem, last, next_run, state_name(task, blocked, now),
                       holder if blocked else None)

    def get(self, task_id: str, scope: Scope = EVERY_TEAM) -> TaskDefinition:
        """The stored definition (not the snapshot: an edit form must carry the current version);
        TaskNotFoundError when there is none, or it is of a team outside ``scope`` (the same answer)."""
        check_id(task_id, "task_id")
        task = self._context().tasks.get(task_id)
        if task is None or not scope.allows(task.team):
            raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
        return task

    def occurrences(self, task_id: str, limit: int = 50, before: str | None = None,
                    team: str | None = None) -> OccurrencePage:
        """A task's journal rows, newest first, one keyset page after the cursor ``before``;
        ``team``: its history in that team only (what it left in a team it moved from is not shown)."""
        check_id(task_id, "task_id")
        check_int(limit, "limit", 1, PAGE_LIMIT)
        cursor = check_cursor(before, "before")
        found = self._queries().occurrences(task_id, limit + 1, (cursor.key, cursor.id) if cursor else None, team)
        rows = found[:limit]
        last = rows[-1] if rows else None
        next_before = f"{last.created_at}.{last.occurrence_id}" if last is not None and len(found) > limit else None
        return OccurrencePage(rows, next_before, any(row.status == ExecutionStatus.RUNNING for row in rows))

    def next_runs(self, task: TaskDefinition, count: int = PREVIEW_RUNS) -> list[int]:
        """The task's next fire minutes from the DB clock ([] when disabled)."""
        if not task.enabled:
            return []
        return task.upcoming(self.now_ms(), count)

    def schedule_counts(self, task_id: str, team: str | None = None) -> ScheduleCounts:
        """What the journal holds of the task's occurrences that did not run (``TaskQueries``)."""
        return self._queries().schedule_counts(task_id, team)

    def live_groups(self) -> list[str]:
        """The node groups live nodes serve (a heartbeat within three intervals): the form's suggestions."""
        ctx = self._context()
        _, alive = ctx.nodes.alive(3 * ctx.config.heartbeat_interval_ms)
        return sorted({group for node in alive for group in node.groups})

    def preview(self, cron: str, timezone: str | None, calendar: Calendar | None = None) -> CronPreview:
        """What a schedule being typed means: its description and next run times (through
        ``calendar``'s window and exclusions, when one is given).

        Raises InvalidCronError (cron) or ConfigError("timezone") like registering would.
        """
        expr = validate_cron(cron)
        zone = validate_timezone(timezone)
        runs = (calendar or Calendar()).upcoming(expr, zone, self.now_ms(), PREVIEW_RUNS)
        return CronPreview(expr, zone, describe(expr), runs, [dst_note(expr, zone, ms) for ms in runs], calendar)

    def state(self, task_id: str) -> TaskState:
        """``ok``, ``paused``, ``disabled`` or ``blocked`` (with what blocks it and what it cost)."""
        task = self.get(task_id)
        queries = self._queries()
        holder = queries.slot_holders([task_id]).get(task_id)
        last = queries.last_executions([task_id]).get(task_id)
        now = self.now_ms()
        blocked = holder is not None and blocks(task, holder, now)
        skipped = queries.skipped_since(task_id, holder.created_at) if blocked and holder is not None else 0
        return TaskState(state_name(task, blocked, now), holder.occurrence_id if blocked and holder else None,
                         skipped, last.status if last else None, task.paused)

    # --- writes ----------------------------------------------------------------------------

    def pause(self, task_id: str, reason: str | None = None, until_ms: int | None = None,
              by: str | None = None) -> TaskDefinition:
        """No cron occurrences until ``resume`` (or ``until_ms``, DB clock); running ones go on."""
        check_id(task_id, "task_id")
        reason = check_optional_text(reason, "reason", REASON_MAX)
        by = check_optional_text(by, "by", ID_MAX, single_line=True)
        if until_ms is not None and check_ms(until_ms, "until_ms") <= self.now_ms():
            raise ConfigError("until_ms", "must be in the future (DB clock)")
        return self._paused(task_id, self._context().tasks.pause(task_id, until_ms, by, reason))

    def resume(self, task_id: str, by: str | None = None) -> TaskDefinition:
        check_id(task_id, "task_id")
        check_optional_text(by, "by", ID_MAX, single_line=True)
        return self._paused(task_id, self._context().tasks.resume(task_id))

    def _paused(self, task_id: str, stored: TaskDefinition | None) -> TaskDefinition:
        if stored is None:
            raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
        return stored


    def delete(self, task_id: str, expected_updated_at: int | None) -> TaskDefinition:
        """Delete a task if it is still the version the operator saw (compare-and-set).

        Same effects as ``Scheduler.unregister``: the slot goes with it when free, running
        executions of the task are cancelled as ``deleted``. Returns the deleted definition;
        ConflictError when it changed (nothing deleted).
        """
        check_ms(expected_updated_at, "expected_updated_at")
        ctx = self._context()
        current = self.get(task_id)
        if current.updated_at != expected_updated_at:
            raise ConflictError(f"task {task_id!r} changed since it was read (updated_at {current.updated_at})",
                                task_id=task_id)
        if not ctx.tasks.delete(task_id, revision=current.revision):
            raise ConflictError(f"task {task_id!r} changed concurrently; read it again", task_id=task_id)
        ctx.task_deleted(task_id)
        return current


def blocks(task: TaskDefinition, holder: Execution, now_ms: int) -> bool:
    """Whether the slot's holder blocks the task: unknown (until an operator decides), or running
    past the task's next fire time after it began (that occurrence will be skipped)."""
    if holder.status == ExecutionStatus.UNKNOWN:
        return True
    if holder.status != ExecutionStatus.RUNNING:
        return False
    start = holder.scheduled_minute if holder.scheduled_minute is not None else holder.created_at
    following = task.upcoming(start, 1)
    return bool(following) and following[0] <= now_ms


def state_name(task: TaskDefinition, blocked: bool, now_ms: int) -> TaskStateName:
    if not task.enabled:
        return TaskStateName.DISABLED
    if task.paused is not None and task.paused.active(now_ms):
        return TaskStateName.PAUSED
    return TaskStateName.BLOCKED if blocked else TaskStateName.OK
