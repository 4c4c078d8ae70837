"""Read-only queries over the journal and the log table for the operator's pages: keyset pages
(one index range scan at any depth, migration 0005), counts bounded by ``cap``, and windows read
from the DB clock first (docs/architecture.md, "The dashboard"). No statement here writes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, String, and_, bindparam, func, or_, select, tuple_, union_all
from sqlalchemy.engine import Connection, Engine, Row

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import executions, logs, nodes, tasks
from scheduler_core.model import Execution, ExecutionLog
from scheduler_core.statuses import FAILURE_STATUSES, ExecutionStatus, LogPersistenceStatus
from scheduler_core.store.executions import execution_from_row
from scheduler_core.store.logs import LogFilter, log_from_row
from scheduler_core.store.teams import history_in
from scheduler_core.store.transactions import read

T = TypeVar("T")
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Cursor:
    """A position in a newest-first list: the row's sort key (ms) and its id (the tie-breaker)."""

    key: int
    id: str

    def token(self) -> str:
        """The cursor as it travels in a URL: ``<ms>.<id>`` (ms has no dot; the id may)."""
        return f"{self.key}.{self.id}"


@dataclass(frozen=True)
class KeysetPage(Generic[T]):
    """One page of a newest-first list and the cursors of its neighbours (None at either end)."""

    rows: list[T]
    older: Cursor | None  # pass as ``before`` for the next, older page
    newer: Cursor | None  # pass as ``after`` for the previous, newer page


@dataclass(frozen=True)
class BoundedCount:
    """A count that stopped at ``cap``: ``value`` is exact when ``more`` is False."""

    value: int
    more: bool

    @property
    def label(self) -> str:
        return f"{self.value:,}+" if self.more else f"{self.value:,}"


@dataclass(frozen=True)
class RunCell:
    """One occurrence in the run-history grid: enough to colour, letter and link it."""

    occurrence_id: str
    task_id: str
    status: ExecutionStatus
    reason: str | None
    trigger: str
    created_at: int  # when it was journaled (DB clock ms)
    scheduled_minute: int | None


@dataclass(frozen=True)
class HourBucket:
    """Journal rows created in the hour starting at ``start`` (UTC ms, DB clock)."""

    start: int
    total: int
    failures: int


def _keyset(query: Select[Any], key: ColumnElement[int], ident: ColumnElement[str], limit: int,
            before: Cursor | None, after: Cursor | None) -> Select[Any]:
    if after is not None:  # the page just newer than ``after``: read upwards, the caller reverses
        query = query.where(key >= after.key, tuple_(key, ident) > tuple_(after.key, after.id))
        return query.order_by(key.asc(), ident.asc()).limit(limit + 1)
    if before is not None:
        query = query.where(key <= before.key, tuple_(key, ident) < tuple_(before.key, before.id))
    return query.order_by(key.desc(), ident.desc()).limit(limit + 1)


def _fetch(engine: Engine, base: Select[Any], key: ColumnElement[int], ident: ColumnElement[str],
           convert: Callable[[Row[Any]], T], cursor_of: Callable[[T], Cursor], limit: int, before: Cursor | None,
           after: Cursor | None) -> KeysetPage[T]:
    """Read ``limit + 1`` rows past the cursor, trim them to a page and work out the neighbours.

    A newer page (``after``) that reaches the newest row is the first page instead: it is
    then full, as the operator expects at the top of the list.
    """

    def load(before: Cursor | None, after: Cursor | None) -> list[T]:
        query = _keyset(base, key, ident, limit, before, after)
        return read(engine, lambda conn: [convert(r) for r in conn.execute(query)])

    found = load(before, after)
    if after is not None:
        if len(found) <= limit:
            return _fetch(engine, base, key, ident, convert, cursor_of, limit, None, None)
        rows = list(reversed(found[:limit]))
        return KeysetPage(rows, cursor_of(rows[-1]), cursor_of(rows[0]))
    rows = found[:limit]
    older = cursor_of(rows[-1]) if len(found) > limit else None
    newer = cursor_of(rows[0]) if before is not None and rows else None
    return KeysetPage(rows, older, newer)


def _bounded(conn: Connection, query: Select[Any], cap: int) -> BoundedCount:
    limited = query.limit(cap + 1).subquery()
    found = int(conn.execute(select(func.count()).select_from(limited)).scalar_one())
    return BoundedCount(min(found, cap), found > cap)


RUN_COLUMNS = (executions.c.occurrence_id, executions.c.task_id, executions.c.status, executions.c.reason,
               executions.c.trigger, executions.c.created_at, executions.c.scheduled_minute)


def recent_runs_query(task_ids: Sequence[str], runs: int) -> tuple[Select[Any], dict[str, str]] | None:
    """The run grid's read and its parameters: for each task, its newest ``runs`` journal rows,
    oldest first per task.

    One ``UNION ALL`` of one limited read per task, each a backward range scan of the
    (task_id, created_at, occurrence_id) index that stops after ``runs`` rows. A window over
    the tasks' rows (``ROW_NUMBER() OVER (PARTITION BY task_id ...) <= runs``) gives the same
    answer but numbers every row of every task on the page first: a task that has run every
    minute for a year has half a million. The statement is built once per task count (the ids
    are parameters), since building and compiling 50 reads costs more than running them.
    ``None`` when there are no tasks."""
    ids = sorted(set(task_ids))
    if not ids:
        return None
    return _recent_runs_statement(len(ids), runs), {f"task_{n}": task_id for n, task_id in enumerate(ids)}


@functools.lru_cache(maxsize=32)
def _recent_runs_statement(count: int, runs: int) -> Select[Any]:
    # A row the task left in a team it moved from is not its run here (docs/teams.md).
    its_team = or_(executions.c.team.is_(None), executions.c.team == select(tasks.c.team).where(
        tasks.c.id == executions.c.task_id).scalar_subquery())
    newest = [select(*RUN_COLUMNS).where(executions.c.task_id == bindparam(f"task_{n}", type_=String()), its_team)
              .order_by(executions.c.created_at.desc(), executions.c.occurrence_id.desc()).limit(runs)
              .subquery(f"runs_{n}") for n in range(count)]
    # each member is wrapped (SELECT * FROM (...)): SQLite takes no ORDER BY / LIMIT on a bare member
    parts = [select(*part.c) for part in newest]
    combined = (parts[0] if len(parts) == 1 else union_all(*parts)).subquery("runs")
    return select(*combined.c).order_by(combined.c.task_id, combined.c.created_at, combined.c.occurrence_id)


class JournalQueries:
    """The dashboard's reads of the journal, logs, tasks and nodes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- lists ------------------------------------------------------------------------

    def execution_page(self, status: str | None, task_id: str | None, limit: int, before: Cursor | None = None,
                       after: Cursor | None = None, scope: Scope = EVERY_TEAM) -> KeysetPage[Execution]:
        """Journal rows of ``scope``'s teams newest first by (created_at, occurrence_id), optionally
        one status / task.

        Indexes: (created_at, occurrence_id), (status, created_at, occurrence_id),
        (task_id, created_at, occurrence_id).
        """
        query = select(executions).where(*history_in(executions, scope))
        if status is not None:
            query = query.where(executions.c.status == status)
        if task_id is not None:
            query = query.where(executions.c.task_id == task_id)
        return _fetch(self.engine, query, executions.c.created_at, executions.c.occurrence_id, execution_from_row,
                      lambda e: Cursor(e.created_at, e.occurrence_id), limit, before, after)

    def log_page(self, where: LogFilter, limit: int, before: Cursor | None = None,
                 after: Cursor | None = None, scope: Scope = EVERY_TEAM) -> KeysetPage[ExecutionLog]:
        """Log rows newest first by (started_at, id), filtered.

        Indexes: (started_at, id), (task_id, started_at, id), (status, started_at, id),
        (source, started_at, id); the time window is a range on started_at in each of them.
        """
        query = where.select().where(*history_in(logs, scope))
        return _fetch(self.engine, query, logs.c.started_at, logs.c.id, log_from_row,
                      lambda log: Cursor(log.started_at or 0, log.id), limit, before, after)

    def log(self, log_id: str, scope: Scope = EVERY_TEAM) -> ExecutionLog | None:
        query = select(logs).where(logs.c.id == log_id, *history_in(logs, scope))
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return log_from_row(row) if row is not None else None

    def running(self, scope: Scope = EVERY_TEAM, limit: int = 500) -> list[Execution]:
        """Executions of ``scope`` owned under a lease now (the nodes page), oldest first."""
        query = (select(executions).where(executions.c.status == ExecutionStatus.RUNNING,
                                          *history_in(executions, scope))
                 .order_by(executions.c.created_at, executions.c.occurrence_id).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def log_failures(self, limit: int, offset: int, scope: Scope = EVERY_TEAM) -> list[Execution]:
        """Journal rows of ``scope`` whose log projection is pending, the oldest change first."""
        query = (select(executions).where(executions.c.log_persistence == LogPersistenceStatus.PENDING,
                                          *history_in(executions, scope))
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit).offset(offset))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def in_scope(self, occurrence_id: str, scope: Scope) -> bool:
        """Whether the journal row ``occurrence_id`` is of a team in ``scope`` (False when absent)."""
        query = select(executions.c.occurrence_id).where(executions.c.occurrence_id == occurrence_id,
                                                         *history_in(executions, scope))
        return read(self.engine, lambda conn: conn.execute(query).first()) is not None

    def now_ms(self) -> int:
        """The DB clock, for "3 s ago" on a page read at this instant."""
        return read(self.engine, lambda conn: to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms"))

    def recent_runs(self, task_ids: Sequence[str], runs: int) -> dict[str, list[RunCell]]:
        """The newest ``runs`` journal rows of each of ``task_ids``, oldest first per task: one
        statement (``recent_runs_query``), whose work is bounded by ``len(task_ids) * runs`` rows
        however long each task's history is. Tasks that never ran are absent."""
        built = recent_runs_query(task_ids, runs)
        if built is None:
            return {}
        query, params = built

        def work(conn: Connection) -> dict[str, list[RunCell]]:
            found: dict[str, list[RunCell]] = {}
            for row in conn.execute(query, params):
                cell = RunCell(row.occurrence_id, row.task_id, ExecutionStatus(row.status), row.reason, row.trigger,
                               to_ms(row.created_at, "created_at"),
                               optional_ms(row.scheduled_minute, "scheduled_minute"))
                found.setdefault(cell.task_id, []).append(cell)
            return found

        return read(self.engine, work)

    # --- counts -----------------------------------------------------------------------

    def status_counts(self, statuses: Sequence[str], cap: int, scope: Scope = EVERY_TEAM) -> dict[str, BoundedCount]:
        """Journal rows of ``scope`` per status, each counted up to ``cap`` on the (status, ...) index."""
        mine = history_in(executions, scope)

        def work(conn: Connection) -> dict[str, BoundedCount]:
            return {s: _bounded(conn, select(executions.c.occurrence_id).where(executions.c.status == s, *mine), cap)
                    for s in statuses}

        return read(self.engine, work)

    def window_counts(self, statuses: Sequence[str], window_ms: int, cap: int,
                      scope: Scope = EVERY_TEAM) -> tuple[int, dict[str, BoundedCount]]:
        """(the window's start on the DB clock, journal rows per status created since then), each
        counted up to ``cap`` on the (status, created_at, occurrence_id) index: one range a status."""

        def work(conn: Connection) -> tuple[int, dict[str, BoundedCount]]:
            since = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms") - window_ms
            return since, {s: _bounded(conn, select(executions.c.occurrence_id).where(
                executions.c.status == s, executions.c.created_at >= since, *history_in(executions, scope)), cap)
                for s in statuses}

        return read(self.engine, work)

    def newest_of(self, statuses: Sequence[str], since_ms: int, limit: int,
                  scope: Scope = EVERY_TEAM) -> list[Execution]:
        """The ``limit`` newest journal rows in any of ``statuses`` created at or after ``since_ms``:
        one backwards range of the (status, created_at, occurrence_id) index a status (LIMIT each),
        merged here, so the cost does not grow with the journal."""

        def work(conn: Connection) -> list[Execution]:
            found: list[Execution] = []
            for status in statuses:
                query = (select(executions).where(executions.c.status == status, executions.c.created_at >= since_ms,
                                                  *history_in(executions, scope))
                         .order_by(executions.c.created_at.desc(), executions.c.occurrence_id.desc()).limit(limit))
                found.extend(execution_from_row(row) for row in conn.execute(query))
            found.sort(key=lambda e: (e.created_at, e.occurrence_id), reverse=True)
            return found[:limit]

        return read(self.engine, work)

    def log_failure_count(self, cap: int, scope: Scope = EVERY_TEAM) -> BoundedCount:
        """Journal rows whose log projection is pending, up to ``cap`` (the log_persistence index)."""
        query = select(executions.c.occurrence_id).where(executions.c.log_persistence == LogPersistenceStatus.PENDING,
                                                         *history_in(executions, scope))
        return read(self.engine, lambda conn: _bounded(conn, query, cap))

    def task_count(self, scope: Scope = EVERY_TEAM) -> int:
        """Stored tasks of ``scope`` (an index scan over at most some ten thousand rows)."""
        query = select(func.count()).select_from(tasks)
        if scope.teams is not None:
            query = query.where(tasks.c.team.in_(sorted(scope.teams)))
        return int(read(self.engine, lambda conn: conn.execute(query).scalar_one()))

    def nodes_alive(self, within_ms: int) -> int:
        """Nodes not stopped whose last heartbeat is at most ``within_ms`` old (DB clock)."""

        def work(conn: Connection) -> int:
            now = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
            query = select(func.count()).select_from(nodes).where(
                nodes.c.stopped_at.is_(None), nodes.c.last_seen_at >= now - within_ms)
            return int(conn.execute(query).scalar_one())

        return read(self.engine, work)

    # --- chart ------------------------------------------------------------------------

    def hourly(self, hours: int, scope: Scope = EVERY_TEAM) -> list[HourBucket]:
        """Executions and failures per hour over the last ``hours`` hours, oldest first.

        The last bucket is the current (partial) hour of the DB clock; empty hours are
        included with zeros. Rows are grouped by creation time (when the occurrence was
        journaled). The count reads the (status, created_at, occurrence_id) index only.
        """

        def work(conn: Connection) -> list[HourBucket]:
            now = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
            first = (now // HOUR_MS - hours + 1) * HOUR_MS
            end = first + hours * HOUR_MS
            bucket = ((executions.c.created_at - first) // HOUR_MS).label("bucket")
            query = (select(executions.c.status, bucket, func.count())
                     .where(and_(executions.c.created_at >= first, executions.c.created_at < end),
                            *history_in(executions, scope))
                     .group_by(executions.c.status, bucket))
            totals = [0] * hours
            failures = [0] * hours
            for status, index, count in conn.execute(query):
                slot = int(index)
                if 0 <= slot < hours:
                    totals[slot] += int(count)
                    if status in FAILURE_STATUSES:  # what the chart counts as failures
                        failures[slot] += int(count)
            return [HourBucket(first + i * HOUR_MS, totals[i], failures[i]) for i in range(hours)]

        return read(self.engine, work)
