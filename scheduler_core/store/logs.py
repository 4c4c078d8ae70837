"""Attempt logs: their queries, retention, and the projection of one journal row (``project``).

The journal is the truth; a log row is its projection, keyed by the attempt's stable UUID
(``store/journal/projection.py``: ``project_logs``, which also marks the journal ``persisted``,
in one transaction, so replaying it is harmless). The node projects a batch of terminal commits
inside their own transaction (``ExecutionRepository.finish_many``); ``repair_log`` uses
``project``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql import ColumnElement, Select

from scheduler_core.db.clock import db_now_ms, optional_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import logs
from scheduler_core.model import Execution, ExecutionLog
from scheduler_core.statuses import AttemptStatus, ExecutionStatus, Trigger
from scheduler_core.store.journal import log_row, project_logs
from scheduler_core.store.transactions import read, write

__all__ = ["PRUNE_BATCH", "LogFilter", "LogRepository", "log_from_row", "log_row", "project_logs"]

PRUNE_BATCH = 5_000  # log rows one retention transaction deletes at most (a short lock, however many are due)


@dataclass(frozen=True)
class LogFilter:
    task_id: str | None = None
    status: AttemptStatus | None = None
    trigger_source: str | None = None
    started_after: int | None = None  # ms, inclusive
    started_before: int | None = None  # ms, exclusive

    def select(self) -> Select[Any]:
        """``SELECT logs`` narrowed by every filter that is set (one place for the list and its pages)."""
        query = select(logs)
        if self.task_id is not None:
            query = query.where(logs.c.task_id == self.task_id)
        if self.status is not None:
            query = query.where(logs.c.status == self.status)
        if self.trigger_source is not None:
            query = query.where(logs.c.source == self.trigger_source)
        if self.started_after is not None:
            query = query.where(logs.c.started_at >= self.started_after)
        if self.started_before is not None:
            query = query.where(logs.c.started_at < self.started_before)
        return query


def log_from_row(row: Row[Any]) -> ExecutionLog:
    data = row._mapping
    return ExecutionLog(
        id=data["id"], occurrence_id=data["occurrence_id"], task_id=data["task_id"],
        trigger=Trigger(data["trigger"]), source=data["source"], status=ExecutionStatus(data["status"]),
        sequence=int(data["sequence"]), attempt=int(data["attempt"]),
        node_id=data["node_id"], started_at=optional_ms(data["started_at"], "started_at"),
        finished_at=optional_ms(data["finished_at"], "finished_at"),
        duration_ms=optional_ms(data["duration_ms"], "duration_ms"), error=data["error"], result=data["result"])


class LogRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def project(self, execution: Execution) -> bool:
        """Write the log rows of a journaled execution and mark it ``persisted``.

        Returns False when the journal was not ``pending`` (nothing to do, or already done).
        Raises LogPersistFailedError when an existing row differs from the journal.
        """
        return write(self.engine, lambda conn: bool(project_logs(conn, [execution])))

    def query(self, where: LogFilter, limit: int, offset: int) -> list[ExecutionLog]:
        query = where.select()
        query = query.order_by(logs.c.started_at.desc(), logs.c.id.desc()).limit(limit).offset(offset)
        return read(self.engine, lambda conn: [log_from_row(r) for r in conn.execute(query)])

    def prune(self, max_logs: int | None, retention_days: int | None) -> int:
        """Delete log rows beyond ``max_logs`` (newest kept) or older than ``retention_days``.

        Only the log table changes; the journal keeps every attempt. The rows go ``PRUNE_BATCH``
        per transaction (a short lock each, however many are due), until a batch comes back
        short. Returns rows deleted.
        """
        deleted = 0
        if retention_days is not None:
            deleted += self._delete_batches(lambda: logs.c.started_at < db_now_ms() - retention_days * 86_400_000)
        if max_logs is not None:
            boundary = read(self.engine, lambda conn: conn.execute(
                select(logs.c.started_at, logs.c.id).order_by(logs.c.started_at.desc(), logs.c.id.desc())
                .offset(max_logs).limit(1)).first())
            if boundary is not None:
                at, last_id = boundary[0], boundary[1]
                deleted += self._delete_batches(lambda: (logs.c.started_at < at) | (
                    (logs.c.started_at == at) & (logs.c.id <= last_id)))
        return deleted

    def _delete_batches(self, condition: Callable[[], ColumnElement[bool]]) -> int:
        """DELETE the rows matching ``condition``, at most ``PRUNE_BATCH`` per transaction
        (MySQL: ``DELETE ... LIMIT``; elsewhere by primary key from a limited subquery)."""
        deleted = 0
        while True:
            def work(conn: Connection) -> int:
                if dialect_kind(conn) == "mysql":
                    statement = delete(logs).where(condition()).with_dialect_options(mysql_limit=PRUNE_BATCH)
                else:
                    statement = delete(logs).where(logs.c.id.in_(
                        select(logs.c.id).where(condition()).limit(PRUNE_BATCH).scalar_subquery()))
                return int(conn.execute(statement).rowcount)

            batch = write(self.engine, work)
            deleted += batch
            if batch < PRUNE_BATCH:
                return deleted

    def count(self) -> int:
        return int(read(self.engine, lambda conn: conn.execute(select(func.count()).select_from(logs)).scalar_one()))
