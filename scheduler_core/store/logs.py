"""Attempt logs: projection from the journal, queries, retention.

The journal is the truth; a log row is its projection, keyed by the attempt's stable UUID.
Projection inserts missing rows and compares existing ones field by field, then marks the
journal ``persisted`` -- all in one transaction, so replaying it (after a lost
acknowledgement, or from another node's ``repair_log``) is harmless. The node projects a
batch of terminal commits inside their own transaction (``project_logs`` called by
``ExecutionRepository.finish_many``); ``repair_log`` uses ``project``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql import ColumnElement, Select

from scheduler_core.db.clock import db_now_ms, optional_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, logs
from scheduler_core.errors import LogPersistFailedError
from scheduler_core.model import Attempt, Execution, ExecutionLog
from scheduler_core.store.dialect import Batch, StatementCache, insert_ignore_many, run
from scheduler_core.store.transactions import read, write

PRUNE_BATCH = 5_000  # log rows one retention transaction deletes at most (a short lock, however many are due)

_COMPARED = ("occurrence_id", "task_id", "trigger", "source", "status", "sequence", "attempt", "node_id",
             "started_at", "finished_at", "duration_ms", "error", "result")


@dataclass(frozen=True)
class LogFilter:
    task_id: str | None = None
    status: str | None = None
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


def log_row(execution: Execution, attempt: Attempt) -> dict[str, Any]:
    finished = attempt.finished_at
    return {
        "id": attempt.log_id, "occurrence_id": execution.occurrence_id, "task_id": execution.task_id,
        "trigger": execution.trigger, "source": execution.source, "status": attempt.status or "unknown",
        "sequence": attempt.sequence, "attempt": attempt.attempt, "node_id": attempt.node_id,
        "started_at": attempt.started_at, "finished_at": finished,
        "duration_ms": None if finished is None else max(0, finished - attempt.started_at),
        "error": attempt.error, "result": attempt.result,
    }


def log_from_row(row: Row[Any]) -> ExecutionLog:
    data = row._mapping
    return ExecutionLog(
        id=data["id"], occurrence_id=data["occurrence_id"], task_id=data["task_id"], trigger=data["trigger"],
        source=data["source"], status=data["status"], sequence=int(data["sequence"]), attempt=int(data["attempt"]),
        node_id=data["node_id"], started_at=optional_ms(data["started_at"], "started_at"),
        finished_at=optional_ms(data["finished_at"], "finished_at"),
        duration_ms=optional_ms(data["duration_ms"], "duration_ms"), error=data["error"], result=data["result"])


def _normal(value: Any) -> Any:
    """Compare JSON-ish values the same way whatever the driver returned."""
    return json.dumps(value, sort_keys=True, default=str)


def project_logs(conn: Connection, journaled: Sequence[Execution], cache: StatementCache | None = None,
                 mark: bool = True) -> set[str]:
    """Project the attempts of journaled executions into log rows, in the caller's transaction,
    and mark those that were ``pending`` as ``persisted``; returns the ids so marked.

    Missing rows are inserted; rows that exist already (a replay) are compared field by field
    and a difference raises LogPersistFailedError. The caller's transaction is the unit: the
    terminal commit of a batch, or one ``project`` call. Without ``mark`` the caller's own
    write in the same transaction says ``persisted`` (a batch's terminal commit does, and is
    rolled back with the projection if it fails); every execution given is then returned.
    """
    rows = [log_row(execution, a) for execution in journaled for a in execution.attempts]
    if rows:
        inserted = insert_ignore_many(conn, logs, rows, {"created_at": db_now_ms()}, cache, "logs")
        # Rows that were there already (a replay) must match; MySQL cannot tell which those are.
        existing = rows if inserted is None else [r for r in rows if r["id"] not in inserted]
        if existing:
            _compare_existing(conn, existing)
    ids = [execution.occurrence_id for execution in journaled]
    if not ids or not mark:
        return set(ids)
    batch = Batch(conn).listed("ids", ids)

    def marked() -> Any:
        pending = and_(batch.one_of(executions.c.occurrence_id, "ids"), executions.c.log_persistence == "pending")
        statement = update(executions).where(pending).values(log_persistence="persisted")
        return statement if dialect_kind(conn) == "mysql" else statement.returning(executions.c.occurrence_id)

    statement: Any = cache.driver("mark_persisted", marked) if cache is not None and batch.cacheable else marked()
    if dialect_kind(conn) != "mysql":
        return set(run(conn, statement, batch.params).scalars().all())
    if len(ids) == 1:
        return set(ids) if conn.execute(statement, batch.params).rowcount == 1 else set()
    # MySQL, several rows (no UPDATE ... RETURNING): lock the pending ones, then mark exactly those.
    ids = list(conn.execute(select(executions.c.occurrence_id).where(
        executions.c.occurrence_id.in_(ids), executions.c.log_persistence == "pending").with_for_update()).scalars())
    if ids:
        conn.execute(update(executions).where(executions.c.occurrence_id.in_(ids)).values(log_persistence="persisted"))
    return set(ids)


def _compare_existing(conn: Connection, rows: list[dict[str, Any]]) -> None:
    stored = {r.id: r._mapping for r in conn.execute(select(logs).where(logs.c.id.in_([r["id"] for r in rows])))}
    for row in rows:
        existing = stored.get(row["id"])
        if existing is None:
            raise LogPersistFailedError(f"log {row['id']} was not written", log_id=row["id"])
        for name in _COMPARED:
            if _normal(existing[name]) != _normal(row[name]):
                raise LogPersistFailedError(
                    f"log {row['id']} differs from the journal in {name!r}", log_id=row["id"], field=name)


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
