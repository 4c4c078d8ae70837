"""What ``/metrics`` reports, read from the database in one read transaction per scrape.

Every figure is what the shared database knows, so any node or web worker answers the same.
Eight statements, each an aggregate over an index range or a small table:

1. scalar counts (one statement): the DB clock, executions unknown / running / queued, log
   writes pending, tasks (all, paused, disabled, blocked by an unknown run, from a task file);
2. executions journaled in the last ``EXECUTION_WINDOW_MS`` by task, team and status, with
   their lease takeovers (``sequence - 1``: each takeover starts a new ownership generation);
3. the notification queue's open rows by status (pending, processing, sending, unknown, dead);
4. deliveries that ended in the last ``EXECUTION_WINDOW_MS`` by provider and outcome;
5. the nodes seen in the window (a node id is per process): heartbeat and last tick duration;
6. fire lateness of cron occurrences journaled in the last ``LATENESS_WINDOW_MS``: a cumulative
   histogram computed in SQL from the first attempt's ``started_at`` minus the scheduled minute;
7. the monotonic totals behind the counters (``metric_totals``, store/totals.py, never deleted),
   summed per series in SQL: two statements, the first ``max_task_series`` tasks counted, then the
   sums (the other tasks as one series per team).

A team's ``Scope`` (docs/teams.md) reads their tasks, history (``history_in``), notifications
and tasks' counters; the nodes are every viewer's. Every team's scope adds no condition at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, literal, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from scheduler_core.access import DEFAULT_TEAM, EVERY_TEAM, Scope
from scheduler_core.db.clock import db_now_ms, to_ms
from scheduler_core.db.tables import executions, logs, nodes, reach_queue, slots, tasks
from scheduler_core.statuses import ExecutionStatus, LogPersistenceStatus, QueueStatus, Trigger
from scheduler_core.store.reach_queue_pages import in_scope
from scheduler_core.store.teams import history_in
from scheduler_core.store.totals import LATENESS_BUCKETS_MS, read_series
from scheduler_core.store.transactions import read

EXECUTION_WINDOW_MS = 24 * 3_600_000  # executions by task and outcome, deliveries: the last day
LATENESS_WINDOW_MS = 3_600_000  # fire lateness: cron occurrences of the last hour
OPEN_QUEUE_STATUSES = (QueueStatus.PENDING, QueueStatus.PROCESSING, QueueStatus.SENDING, QueueStatus.UNKNOWN,
                       QueueStatus.DEAD)
ENDED_QUEUE_STATUSES = (QueueStatus.SENT, QueueStatus.DEAD, QueueStatus.UNKNOWN, QueueStatus.DISCARDED)


@dataclass(frozen=True)
class NodeBeat:
    node_id: str
    last_seen_at: int  # DB-clock ms of its last heartbeat
    stopped: bool  # it said goodbye
    last_tick_ms: int | None  # its previous tick's duration, reported with the heartbeat


@dataclass(frozen=True)
class Lateness:
    """A cumulative histogram: ``buckets`` pairs each upper bound (ms) with the count at or below it."""

    buckets: tuple[tuple[int, int], ...]
    count: int
    sum_ms: int


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape's figures. One line per field:"""

    now_ms: int  # the database clock when read
    counts: dict[str, int]  # the scalar counts of statement 1, by name
    executions: tuple[tuple[str, str, str, int, int], ...]  # (task_id, team, status, count, takeovers) in the window
    queue: dict[str, int]  # open notification rows by status
    deliveries: tuple[tuple[str, str, int], ...]  # (provider, status, count) ended in the window
    nodes: tuple[NodeBeat, ...]
    lateness: Lateness  # the window's
    totals: tuple[tuple[str, str, str, str, int], ...] = ()  # (metric, series scope, label, team, value), all time


def _count(*conditions: ColumnElement[bool], table: Any = executions) -> Any:
    return select(func.count()).select_from(table).where(*conditions).scalar_subquery()


def _scalar_counts(now: ColumnElement[int], scope: Scope) -> dict[str, Any]:
    blocked = slots.join(executions, executions.c.occurrence_id == slots.c.occurrence_id)
    runs = history_in(executions, scope)
    own = [] if scope.teams is None else [tasks.c.team.in_(sorted(scope.teams))]
    return {
        "executions_unknown": _count(executions.c.status == ExecutionStatus.UNKNOWN, *runs),
        "executions_running": _count(executions.c.status == ExecutionStatus.RUNNING, *runs),
        "executions_queued": _count(executions.c.status == ExecutionStatus.QUEUED, *runs),
        "log_writes_pending": _count(executions.c.log_persistence == LogPersistenceStatus.PENDING, *runs),
        "tasks": _count(*own, table=tasks),
        "tasks_paused": _count(tasks.c.paused_at.is_not(None),
                               or_(tasks.c.paused_until.is_(None), tasks.c.paused_until > now), *own, table=tasks),
        "tasks_disabled": _count(tasks.c.enabled.is_(False), *own, table=tasks),
        "tasks_blocked": _count(executions.c.status == ExecutionStatus.UNKNOWN, *runs, table=blocked),
        "tasks_managed": _count(tasks.c.managed_by.is_not(None), *own, table=tasks),
    }


def _lateness(conn: Connection, since: int, scope: Scope) -> Lateness:
    started = logs.join(executions, and_(logs.c.occurrence_id == executions.c.occurrence_id,
                                         logs.c.attempt == 1, logs.c.sequence == 1))
    late = logs.c.started_at - executions.c.scheduled_minute
    buckets = [func.coalesce(func.sum(case((late <= bound, 1), else_=0)), 0) for bound in LATENESS_BUCKETS_MS]
    row = conn.execute(select(func.count(), func.coalesce(func.sum(late), 0), *buckets).select_from(started).where(
        executions.c.created_at >= since, executions.c.trigger == Trigger.CRON,
        executions.c.scheduled_minute.is_not(None), *history_in(executions, scope))).one()
    return Lateness(tuple(zip(LATENESS_BUCKETS_MS, (int(v) for v in row[2:]), strict=True)), int(row[0]),
                    int(row[1]))


class MetricsRepository:
    """The read side of ``/metrics``: ``snapshot`` reads everything a scrape reports."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def snapshot(self, max_task_series: int, other: str, scope: Scope = EVERY_TEAM) -> MetricsSnapshot:
        """Every figure ``scope`` sees in one read-only transaction (eight statements, see the
        module docstring); the counters' tasks after the first ``max_task_series`` as one series
        per team, ``other``. Changes nothing."""
        return read(self.engine, lambda conn: self._read(conn, max_task_series, other, scope))

    def _read(self, conn: Connection, max_task_series: int, other: str, scope: Scope) -> MetricsSnapshot:
        named = _scalar_counts(db_now_ms(), scope)
        row = conn.execute(select(db_now_ms().label("now"), *(value.label(name) for name, value in named.items()))
                           ).one()
        now = to_ms(row.now, "db_now_ms")
        counts = {name: int(getattr(row, name)) for name in named}
        since = now - EXECUTION_WINDOW_MS
        return MetricsSnapshot(now, counts, self._executions(conn, since, scope), self._queue(conn, scope),
                               self._deliveries(conn, since, scope), self._nodes(conn, since),
                               _lateness(conn, now - LATENESS_WINDOW_MS, scope),
                               tuple(read_series(conn, max_task_series, other, scope)))

    @staticmethod
    def _executions(conn: Connection, since: int, scope: Scope) -> tuple[tuple[str, str, str, int, int], ...]:
        """Grouped by task, status and the rows' own team first (an index range), then each group's
        team: its own, else its task's (``history_in``'s rule, applied per group, not per row)."""
        e = executions.c
        grouped = select(e.task_id, e.status, e.team, func.count().label("n"),
                         func.coalesce(func.sum(e.sequence - literal(1)), 0).label("takeovers")
                         ).where(e.created_at >= since).group_by(e.task_id, e.status, e.team).subquery()
        g = grouped.c
        teamed = select(g.task_id, g.status, func.coalesce(g.team, tasks.c.team, DEFAULT_TEAM).label("team"), g.n,
                        g.takeovers).select_from(grouped.outerjoin(tasks, tasks.c.id == g.task_id)).subquery()
        t = teamed.c
        seen = [] if scope.teams is None else [t.team.in_(sorted(scope.teams))]
        rows = conn.execute(select(t.task_id, t.team, t.status, func.sum(t.n), func.sum(t.takeovers)).where(*seen)
                            .group_by(t.task_id, t.team, t.status)).all()
        return tuple((str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4])) for r in rows)

    @staticmethod
    def _queue(conn: Connection, scope: Scope) -> dict[str, int]:
        seen = in_scope(scope)
        rows = conn.execute(select(reach_queue.c.status, func.count())
                            .where(reach_queue.c.status.in_(OPEN_QUEUE_STATUSES), *([] if seen is None else [seen]))
                            .group_by(reach_queue.c.status)).all()
        return {str(status): int(count) for status, count in rows}

    @staticmethod
    def _deliveries(conn: Connection, since: int, scope: Scope) -> tuple[tuple[str, str, int], ...]:
        seen = in_scope(scope)
        rows = conn.execute(select(reach_queue.c.provider, reach_queue.c.status, func.count())
                            .where(reach_queue.c.status.in_(ENDED_QUEUE_STATUSES), reach_queue.c.updated_at >= since,
                                   *([] if seen is None else [seen]))
                            .group_by(reach_queue.c.provider, reach_queue.c.status)).all()
        return tuple((str(r[0]), str(r[1]), int(r[2])) for r in rows)

    @staticmethod
    def _nodes(conn: Connection, since: int) -> tuple[NodeBeat, ...]:
        rows: Sequence[Any] = conn.execute(
            select(nodes.c.node_id, nodes.c.last_seen_at, nodes.c.stopped_at, nodes.c.last_tick_ms)
            .where(nodes.c.last_seen_at >= since)).all()
        return tuple(NodeBeat(str(r.node_id), to_ms(r.last_seen_at, "last_seen_at"), r.stopped_at is not None,
                              None if r.last_tick_ms is None else int(r.last_tick_ms)) for r in rows)
