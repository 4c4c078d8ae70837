"""Attempt logs: projection from the journal, queries, retention.

The journal is the truth; a log row is its projection, keyed by the attempt's stable UUID.
Projection inserts missing rows and compares existing ones field by field, then marks the
journal ``persisted`` -- all in one transaction, so replaying it (after a lost
acknowledgement, or from another node's ``repair_log``) is harmless.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection, Engine, Row

from scheduler_core.db.clock import db_now_ms, optional_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, logs
from scheduler_core.errors import LogPersistFailedError
from scheduler_core.model import Attempt, Execution, ExecutionLog
from scheduler_core.store.dialect import insert_ignore, read, write

_COMPARED = ("occurrence_id", "task_id", "trigger", "source", "status", "sequence", "attempt", "node_id",
             "started_at", "finished_at", "duration_ms", "error", "result")


@dataclass(frozen=True)
class LogFilter:
    task_id: str | None = None
    status: str | None = None
    trigger_source: str | None = None
    started_after: int | None = None  # ms, inclusive
    started_before: int | None = None  # ms, exclusive


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


class LogRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def project(self, execution: Execution) -> bool:
        """Write the log rows of a journaled execution and mark it ``persisted``.

        Returns False when the journal was not ``pending`` (nothing to do, or already done).
        Raises LogPersistFailedError when an existing row differs from the journal.
        """

        def work(conn: Connection) -> bool:
            rows = [log_row(execution, a) for a in execution.attempts]
            if rows:
                inserted = conn.execute(insert_ignore(conn, logs, [{**r, "created_at": db_now_ms()} for r in rows]))
                if dialect_kind(conn) == "mysql" or inserted.rowcount != len(rows):
                    self._compare_existing(conn, rows)
            return conn.execute(
                update(executions).where(executions.c.occurrence_id == execution.occurrence_id,
                                         executions.c.log_persistence == "pending")
                .values(log_persistence="persisted")).rowcount == 1

        return write(self.engine, work)

    @staticmethod
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

    def query(self, where: LogFilter, limit: int, offset: int) -> list[ExecutionLog]:
        query = select(logs)
        if where.task_id is not None:
            query = query.where(logs.c.task_id == where.task_id)
        if where.status is not None:
            query = query.where(logs.c.status == where.status)
        if where.trigger_source is not None:
            query = query.where(logs.c.source == where.trigger_source)
        if where.started_after is not None:
            query = query.where(logs.c.started_at >= where.started_after)
        if where.started_before is not None:
            query = query.where(logs.c.started_at < where.started_before)
        query = query.order_by(logs.c.started_at.desc(), logs.c.id.desc()).limit(limit).offset(offset)
        return read(self.engine, lambda conn: [log_from_row(r) for r in conn.execute(query)])

    def for_occurrence(self, occurrence_id: str) -> list[ExecutionLog]:
        query = select(logs).where(logs.c.occurrence_id == occurrence_id).order_by(logs.c.attempt)
        return read(self.engine, lambda conn: [log_from_row(r) for r in conn.execute(query)])

    def prune(self, max_logs: int | None, retention_days: int | None) -> int:
        """Delete log rows beyond ``max_logs`` (newest kept) or older than ``retention_days``.

        Only the log table changes; the journal keeps every attempt. Returns rows deleted.
        """

        def work(conn: Connection) -> int:
            deleted = 0
            if retention_days is not None:
                cutoff = db_now_ms() - retention_days * 86_400_000
                deleted += conn.execute(delete(logs).where(logs.c.started_at < cutoff)).rowcount
            if max_logs is not None:
                boundary = conn.execute(select(logs.c.started_at, logs.c.id)
                                        .order_by(logs.c.started_at.desc(), logs.c.id.desc())
                                        .offset(max_logs).limit(1)).first()
                if boundary is not None:
                    deleted += conn.execute(delete(logs).where(
                        (logs.c.started_at < boundary[0])
                        | ((logs.c.started_at == boundary[0]) & (logs.c.id <= boundary[1])))).rowcount
            return deleted

        return write(self.engine, work)

    def count(self) -> int:
        return int(read(self.engine, lambda conn: conn.execute(select(func.count()).select_from(logs)).scalar_one()))
