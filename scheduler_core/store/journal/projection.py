"""The log projection: each attempt of a journal row as its log row, keyed by the attempt's
stable UUID (docs/semantics.md, section 8). Missing rows are inserted and existing ones compared
field by field, so replaying a projection is harmless; then the journal is marked ``persisted``
(``settled.mark_persisted``), all in the caller's transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import logs
from scheduler_core.errors import LogPersistFailedError
from scheduler_core.model import Attempt, Execution
from scheduler_core.statuses import AttemptStatus
from scheduler_core.store.dialect import StatementCache, insert_ignore_many
from scheduler_core.store.journal.settled import mark_persisted

_COMPARED = ("occurrence_id", "task_id", "trigger", "source", "status", "sequence", "attempt", "node_id",
             "started_at", "finished_at", "duration_ms", "error", "result")


def log_row(execution: Execution, attempt: Attempt) -> dict[str, Any]:
    finished = attempt.finished_at
    return {
        "id": attempt.log_id, "occurrence_id": execution.occurrence_id, "task_id": execution.task_id,
        "trigger": execution.trigger, "source": execution.source, "status": attempt.status or AttemptStatus.UNKNOWN,
        "sequence": attempt.sequence, "attempt": attempt.attempt, "node_id": attempt.node_id,
        "started_at": attempt.started_at, "finished_at": finished,
        "duration_ms": None if finished is None else max(0, finished - attempt.started_at),
        "error": attempt.error, "result": attempt.result,
    }


def _normal(value: Any) -> Any:
    """Compare JSON-ish values the same way whatever the driver returned."""
    return json.dumps(value, sort_keys=True, default=str)


def project_logs(conn: Connection, journaled: Sequence[Execution], cache: StatementCache | None = None,
                 mark: bool = True) -> set[str]:
    """Project the attempts of journaled executions into log rows, in the caller's transaction,
    and mark those that were ``pending`` as ``persisted``; returns the ids so marked.

    Missing rows are inserted; rows that exist already (a replay) are compared field by field
    and a difference raises LogPersistFailedError. The caller's transaction is the unit: the
    terminal commit of a batch, or one ``LogRepository.project`` call. Without ``mark`` the
    caller's own write in the same transaction says ``persisted`` (a batch's terminal commit
    does, and is rolled back with the projection if it fails); every execution given is then
    returned.
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
    return mark_persisted(conn, ids, cache)


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
