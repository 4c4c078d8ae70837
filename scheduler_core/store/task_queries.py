"""Read-only queries behind the dashboard's task pages: search, last outcomes, history.

Every query is a keyset page (never OFFSET, never COUNT) that stays fast with 10,000 tasks
and a journal of millions of rows:

- tasks are paged by ``id`` (the primary key);
- "the last execution of a task" is always the journal row with the greatest
  ``(created_at, occurrence_id)`` for that task: one index probe per task on
  ``executions (task_id, created_at, occurrence_id)``, read backwards, LIMIT 1;
- a task's history is paged newest first by ``(created_at, occurrence_id)`` on the same index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement, Select

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.tables import executions, slots, tasks
from scheduler_core.errors import InvalidStoredValueError
from scheduler_core.model import Execution, TaskDefinition
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.executions import execution_from_row
from scheduler_core.store.tasks import task_from_row
from scheduler_core.store.transactions import read

NEVER_RUN = "never"  # the status filter for tasks without any journal row


@dataclass(frozen=True)
class TaskFilter:
    """What a task search keeps; None / empty means "any"."""

    words: tuple[str, ...] = ()  # each must occur in the id, name or description (any case)
    status: str | None = None  # the status of the task's last execution, or NEVER_RUN
    kind: str | None = None  # handler kind; a task without a handler (or kind) is "hook"
    enabled: bool | None = None
    timezone: str | None = None  # exact IANA name
    team: str | None = None  # exactly this team
    scope: Scope = EVERY_TEAM  # the teams the caller may see (docs/teams.md)


@dataclass(frozen=True)
class StoredTask:
    """One row of a search: the definition, or why it cannot be read (shown, never hidden)."""

    id: str
    task: TaskDefinition | None
    problem: str | None = None


def _last_execution_of_task(column: str = "occurrence_id") -> Select[Any]:
    """``column`` of the newest journal row of the task in the enclosing query, in its team (not a
    row it left in a team it moved from: docs/teams.md; correlated on ``tasks``; the journal is
    aliased so that it never binds to an outer ``executions``)."""
    latest = executions.alias("latest")
    return (select(latest.c[column]).where(latest.c.task_id == tasks.c.id,
                                           or_(latest.c.team.is_(None), latest.c.team == tasks.c.team))
            .order_by(latest.c.created_at.desc(), latest.c.occurrence_id.desc()).limit(1)
            .correlate(tasks))


def _handler_kind() -> ColumnElement[Any]:
    # A stored NULL handler, a JSON null and a handler without "kind" all mean a host hook.
    return func.coalesce(tasks.c.handler["kind"].as_string(), "hook")


def _conditions(search: TaskFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    for word in search.words:
        needle = word.lower()
        conditions.append(or_(*(func.lower(column).contains(needle, autoescape=True)
                                for column in (tasks.c.id, tasks.c.name, tasks.c.description))))
    if search.enabled is not None:
        conditions.append(tasks.c.enabled == search.enabled)
    if search.timezone is not None:
        conditions.append(tasks.c.timezone == search.timezone)
    if search.team is not None:
        conditions.append(tasks.c.team == search.team)
    if search.scope.teams is not None:
        conditions.append(tasks.c.team.in_(sorted(search.scope.teams)))
    if search.kind is not None:
        conditions.append(_handler_kind() == search.kind)
    if search.status == NEVER_RUN:
        conditions.append(~exists(select(executions.c.occurrence_id).where(
            executions.c.task_id == tasks.c.id, or_(executions.c.team.is_(None), executions.c.team == tasks.c.team))
            .correlate(tasks)))
    elif search.status is not None:
        latest = _last_execution_of_task("status").scalar_subquery()
        conditions.append(latest == search.status)
    return conditions


def _stored(row: Any) -> StoredTask:
    try:
        return StoredTask(row.id, task_from_row(row))
    except InvalidStoredValueError as exc:
        return StoredTask(row.id, None, exc.message)


class TaskQueries:
    """Read-only statements for the task list and task detail pages."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def search(self, search: TaskFilter, limit: int, after: str | None = None,
               before: str | None = None) -> list[StoredTask]:
        """Tasks matching ``search``, in id order: the first ``limit`` with an id greater than
        ``after``, or (``before`` given) the last ``limit`` with an id less than ``before``.

        The status condition probes each candidate task's newest journal row through the
        (task_id, created_at, occurrence_id) index; there is no scan of the journal.
        """
        query = select(tasks).where(*_conditions(search))
        if before is not None:
            query = query.where(tasks.c.id < before).order_by(tasks.c.id.desc())
        else:
            if after is not None:
                query = query.where(tasks.c.id > after)
            query = query.order_by(tasks.c.id)
        rows = read(self.engine, lambda conn: list(conn.execute(query.limit(limit))))
        found = [_stored(row) for row in rows]
        return found[::-1] if before is not None else found

    def last_executions(self, task_ids: Sequence[str]) -> dict[str, Execution]:
        """The newest journal row of each of ``task_ids`` (one statement for a whole page).

        Each task costs one backwards index probe plus a primary-key read, however long its
        history. Tasks that never ran are absent from the result.
        """
        ids = sorted(set(task_ids))
        if not ids:
            return {}
        latest = _last_execution_of_task().scalar_subquery()
        query = (select(executions).select_from(tasks.join(executions, executions.c.occurrence_id == latest))
                 .where(tasks.c.id.in_(ids)))

        def work(conn: Connection) -> dict[str, Execution]:
            return {row.task_id: execution_from_row(row) for row in conn.execute(query)}

        return read(self.engine, work)

    def occurrences(self, task_id: str, limit: int, before: tuple[int, str] | None = None,
                    team: str | None = None) -> list[Execution]:
        """A task's journal rows, newest first by (created_at, occurrence_id), after the
        cursor ``before`` = (created_at, occurrence_id) of the last row of the previous page;
        ``team``: only its history in that team (rows it left behind in another team are not its)."""
        query = select(executions).where(executions.c.task_id == task_id)
        if team is not None:
            query = query.where(or_(executions.c.team.is_(None), executions.c.team == team))
        if before is not None:
            created_at, occurrence_id = before
            # The <= bound keeps a plain index range scan on every dialect; the OR breaks ties.
            query = query.where(executions.c.created_at <= created_at,
                                or_(executions.c.created_at < created_at,
                                    and_(executions.c.created_at == created_at,
                                         executions.c.occurrence_id < occurrence_id)))
        query = query.order_by(executions.c.created_at.desc(), executions.c.occurrence_id.desc()).limit(limit)
        return read(self.engine, lambda conn: [execution_from_row(row) for row in conn.execute(query)])

    def slot_holders(self, task_ids: Sequence[str]) -> dict[str, Execution]:
        """The execution holding each task's slot (tasks with a free slot are absent): one join."""
        query = (select(executions).join(slots, slots.c.occurrence_id == executions.c.occurrence_id)
                 .where(slots.c.task_id.in_(list(task_ids))))
        return read(self.engine, lambda conn: {e.task_id: e for e in map(execution_from_row, conn.execute(query))})

    def skipped_since(self, task_id: str, since_ms: int) -> int:
        """Occurrences of the task journaled ``skipped`` from ``since_ms`` on (its task index)."""
        query = select(func.count()).select_from(executions).where(
            executions.c.task_id == task_id, executions.c.created_at >= since_ms,
            executions.c.status == ExecutionStatus.SKIPPED)
        return int(read(self.engine, lambda conn: conn.execute(query).scalar_one()))

    def schedule_counts(self, task_id: str, team: str | None = None) -> ScheduleCounts:
        """What the journal holds of the task's occurrences that did not run: missed minutes (a
        summary row counts the minutes it stands for), skipped ones by reason, and those waiting
        for its slot now -- with the oldest row the journal still holds (its task index); ``team``:
        only its history in that team (not what it left in a team it moved from)."""
        c = executions.c
        mine = [c.task_id == task_id] + ([or_(c.team.is_(None), c.team == team)] if team is not None else [])
        by_kind = (select(c.status, c.reason, func.count(), func.sum(func.coalesce(c.missed_count, 1)))
                   .where(*mine, c.status.in_([ExecutionStatus.MISSED, ExecutionStatus.SKIPPED,
                                               ExecutionStatus.QUEUED]))
                   .group_by(c.status, c.reason))
        oldest = select(func.min(c.created_at)).where(*mine)

        def work(conn: Connection) -> ScheduleCounts:
            counts: dict[tuple[str, str | None], int] = {}
            missed = 0
            for status, reason, rows, minutes in conn.execute(by_kind):
                counts[(status, reason)] = int(rows)
                if status == ExecutionStatus.MISSED:
                    missed += int(minutes or 0)
            first = conn.execute(oldest).scalar_one()
            return ScheduleCounts(
                missed=missed, skipped_by_overlap=counts.get((ExecutionStatus.SKIPPED, "slot_busy"), 0),
                dropped_from_buffer=counts.get((ExecutionStatus.SKIPPED, "buffer_full"), 0),
                skipped_by_run_limit=counts.get((ExecutionStatus.SKIPPED, "max_runs"), 0),
                waiting=sum(n for (status, _), n in counts.items() if status == ExecutionStatus.QUEUED),
                since_ms=None if first is None else int(first))

        return read(self.engine, work)


@dataclass(frozen=True)
class ScheduleCounts:
    """Counts over the journal's retention (``since_ms``: its oldest row of the task; None: none)."""

    missed: int  # minutes no node ran
    skipped_by_overlap: int  # skipped: the slot was held (slot_busy)
    dropped_from_buffer: int  # skipped: as many as the overlap policy allows were waiting (buffer_full)
    skipped_by_run_limit: int  # skipped: its max_runs was spent (max_runs)
    waiting: int  # queued now: buffered, catch-up or handed-over runs
    since_ms: int | None
