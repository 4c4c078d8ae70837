"""Rows no owner holds any more: an operator's verdict on an unknown execution, the mark that a
row's logs are projected, and retention's delete (docs/semantics.md D3, G5, G8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, logs
from scheduler_core.model import Execution
from scheduler_core.statuses import LogPersistenceStatus, Resolution
from scheduler_core.store.dialect import Batch, StatementCache, run
from scheduler_core.store.journal.retention import deletable
from scheduler_core.store.journal.rows import Deleted, touch
from scheduler_core.store.journal.slots import release_slot
from scheduler_core.store.journal.transitions import RESOLVE
from scheduler_core.store.totals import Tally

PENDING, PERSISTED = LogPersistenceStatus.PENDING, LogPersistenceStatus.PERSISTED


def resolve(conn: Connection, execution: Execution, verdict: Resolution, expected_updated_at: int,
            resolved_by: str | None, reason: str | None) -> bool:
    """Compare-and-set an unknown execution to the operator's verdict (success or discarded),
    free its slot and count it; applies only while the row is still ``unknown`` with
    ``updated_at == expected_updated_at``."""
    status = RESOLVE.check(verdict)
    changed = conn.execute(update(executions).where(
        executions.c.occurrence_id == execution.occurrence_id, executions.c.status == RESOLVE.only_source,
        executions.c.updated_at == expected_updated_at,
    ).values(status=status, resolved_by=resolved_by, resolution_reason=reason, updated_at=touch(conn))).rowcount
    if changed == 1:
        release_slot(conn, execution.task_id, execution.occurrence_id)
        Tally().execution(execution.task_id, status).write(conn)
    return bool(changed == 1)


def mark_persisted(conn: Connection, occurrence_ids: Sequence[str], cache: StatementCache | None = None) -> set[str]:
    """The rows of ``occurrence_ids`` whose logs were ``pending``: ``persisted``, the ids so marked
    (the caller projected their logs in this transaction)."""
    ids = list(occurrence_ids)
    batch = Batch(conn).listed("ids", ids)

    def marked() -> Any:
        pending = and_(batch.one_of(executions.c.occurrence_id, "ids"), executions.c.log_persistence == PENDING)
        statement = update(executions).where(pending).values(log_persistence=PERSISTED)
        return statement if dialect_kind(conn) == "mysql" else statement.returning(executions.c.occurrence_id)

    statement: Any = cache.driver("mark_persisted", marked) if cache is not None and batch.cacheable else marked()
    if dialect_kind(conn) != "mysql":
        return set(run(conn, statement, batch.params).scalars().all())
    if len(ids) == 1:
        return set(ids) if conn.execute(statement, batch.params).rowcount == 1 else set()
    # MySQL, several rows (no UPDATE ... RETURNING): lock the pending ones, then mark exactly those.
    ids = list(conn.execute(select(executions.c.occurrence_id).where(
        executions.c.occurrence_id.in_(ids), executions.c.log_persistence == PENDING).with_for_update()).scalars())
    if ids:
        conn.execute(update(executions).where(executions.c.occurrence_id.in_(ids)).values(log_persistence=PERSISTED))
    return set(ids)


def delete_retained(conn: Connection, occurrence_ids: Sequence[str], days: int) -> Deleted:
    """Delete the rows of ``occurrence_ids`` that are still ``deletable(days)`` (checked again by
    the DELETE: a row changed since it was read stays), with the attempt logs of those that went."""
    c, ids = executions.c, list(occurrence_ids)
    journal = int(conn.execute(delete(executions).where(c.occurrence_id.in_(ids), deletable(days))).rowcount)
    gone = ids if journal == len(ids) else list(set(ids) - set(conn.execute(
        select(c.occurrence_id).where(c.occurrence_id.in_(ids))).scalars()))
    log_rows = int(conn.execute(delete(logs).where(logs.c.occurrence_id.in_(gone))).rowcount) if gone else 0
    return Deleted(journal, log_rows)
