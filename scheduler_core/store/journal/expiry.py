"""Rows whose owner's lease ran out (docs/semantics.md, section 7): taken over by a new owner,
or settled without one -- ``unknown`` (slot kept) when a handler may have run, ``interrupted``
(slot released) when no attempt ever began. Each applies only while the row is still the
expired one read, so of two nodes recovering one row exactly one change applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions
from scheduler_core.model import Attempt, Execution
from scheduler_core.statuses import LogPersistenceStatus
from scheduler_core.store.journal.rows import Writer, first_lateness, json_attempts, touch
from scheduler_core.store.journal.slots import hand_slot, release_slot
from scheduler_core.store.journal.transitions import MARK_INTERRUPTED, MARK_UNKNOWN, TAKE_OVER, Transition
from scheduler_core.store.totals import Tally


def _expired_by(execution: Execution) -> Any:
    """Still the expired row we read: same token, running, lease still expired (DB clock, now)."""
    return and_(executions.c.occurrence_id == execution.occurrence_id,
                executions.c.execution_token == execution.execution_token,
                executions.c.status == TAKE_OVER.only_source, executions.c.lease_until < db_now_ms())


def _lock_expired(conn: Connection, execution: Execution) -> bool:
    """Lock the expired row for recovery, skipping it when another transaction holds it.

    A row locked by someone else belongs to a live transaction -- often its owner frozen
    mid-write (GC pause, SIGSTOP, VM freeze). Waiting for it would stall this node's whole tick
    (recovery runs before the claims): every other task would miss its minute. The row is
    skipped instead and looked at again next tick. Locking first also makes the following
    UPDATE read the DB clock after the lock is held (``store/owner_write.py``: ``lock_owned``).
    """
    if dialect_kind(conn) == "sqlite":
        return True  # BEGIN IMMEDIATE already serialises writers
    locked = conn.execute(select(executions.c.occurrence_id).where(_expired_by(execution))
                          .with_for_update(skip_locked=True)).first()
    return locked is not None


def take_over(conn: Connection, writer: Writer, execution: Execution, new_token: str) -> bool:
    """Become the owner of an expired execution: new token, sequence + 1, the writer's lease from
    now; the slot keeps pointing at the occurrence and takes the new token; counted. False:
    someone else acted first (or the owner renewed in time)."""
    if not _lock_expired(conn, execution):
        return False
    changed = conn.execute(update(executions).where(_expired_by(execution)).values(
        execution_token=new_token, owner_node=writer.node_id, sequence=executions.c.sequence + 1,
        lease_until=db_now_ms() + writer.lease_ms, updated_at=touch(conn))).rowcount
    if changed == 1:
        hand_slot(conn, execution.task_id, execution.occurrence_id, new_token)
        _count_lateness(Tally().takeover(execution.task_id), execution, execution.attempts).write(conn)
    return bool(changed == 1)


def _count_lateness(tally: Tally, execution: Execution, attempts: Sequence[Attempt]) -> Tally:
    """The first ownership ends here when ``execution`` is its row: its first attempt's fire
    lateness is counted with the transition (``first_lateness``)."""
    late = first_lateness(execution, attempts)
    return tally if late is None else tally.lateness(*late)


def mark_unknown(conn: Connection, execution: Execution, reason: str, attempts: Sequence[Attempt]) -> bool:
    """Settle an expired execution whose handler may have run: ``unknown``, the slot kept until an
    operator resolves it (``lease_expired``, ``attempts_exhausted``)."""
    return _settle(conn, MARK_UNKNOWN, execution, reason, attempts, release=False)


def mark_interrupted(conn: Connection, execution: Execution, reason: str, attempts: Sequence[Attempt]) -> bool:
    """Settle an expired execution that never began an attempt: ``interrupted``, slot released
    (``owner_lost_before_start``)."""
    return _settle(conn, MARK_INTERRUPTED, execution, reason, attempts, release=True)


def _settle(conn: Connection, transition: Transition, execution: Execution, reason: str,
            attempts: Sequence[Attempt], release: bool) -> bool:
    """Close an expired execution without running it (its attempts as given, logs ``pending``
    when there are any), counted. False: someone else acted first."""
    if not _lock_expired(conn, execution):
        return False
    status = transition.only_target
    changed = conn.execute(update(executions).where(_expired_by(execution)).values(
        status=status, reason=reason, attempts=json_attempts(attempts), lease_until=None,
        log_persistence=LogPersistenceStatus.PENDING if attempts else None, updated_at=touch(conn))).rowcount
    if changed == 1 and release:
        release_slot(conn, execution.task_id, execution.occurrence_id)
    if changed == 1:
        _count_lateness(Tally().execution(execution.task_id, status), execution, attempts).write(conn)
    return bool(changed == 1)
