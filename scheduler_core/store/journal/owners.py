"""The owner's writes: begin an attempt, renew the lease, give it up, and the terminal commit.
Each applies only while the row is still owned (docs/semantics.md L1): the lease-checked owner
write of ``store/owner_write.py``, batched as docs/architecture.md (5) describes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, literal, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions
from scheduler_core.statuses import LogPersistenceStatus
from scheduler_core.store.dialect import Batch
from scheduler_core.store.journal.projection import project_logs
from scheduler_core.store.journal.rows import (
    OWNED,
    BeginRequest,
    FinishRequest,
    FinishResult,
    ProjectionFailedError,
    Writer,
    first_lateness,
    json_attempts,
    touch,
)
from scheduler_core.store.journal.slots import release_slots
from scheduler_core.store.journal.transitions import BEGIN, FINISH, GIVE_UP, RENEW
from scheduler_core.store.owner_write import owner_write
from scheduler_core.store.totals import Tally
from scheduler_core.store.transactions import is_retryable

_c = executions.c
_BEGIN_COLUMNS = {"execution_token": _c.execution_token, "attempt": _c.attempt, "attempts": _c.attempts}
_FINISH_COLUMNS = {**_BEGIN_COLUMNS, "status": _c.status, "reason": _c.reason, "log_persistence": _c.log_persistence}


def _ownership() -> dict[str, ColumnElement[Any]]:
    """What ``_owned_batch`` compares every row with: running, and the DB clock now."""
    return {"running": literal(BEGIN.only_source, _c.status.type), "now": db_now_ms()}


def _owned_batch(batch: Batch) -> Any:
    """Still ours, for every row of a batch (token, running, lease unexpired at the DB clock).

    PostgreSQL matches each row's own token; elsewhere ``token IN tokens`` does the same (tokens
    are random per ownership: a token belongs to one occurrence only). Status and lease are
    compared with the batch's shared values (see ``Batch.shared``).
    """
    token = (_c.execution_token == batch.value("execution_token") if batch.cacheable
             else batch.one_of(_c.execution_token, "tokens"))
    return and_(batch.matches(), token, _c.status == batch.shared("running"), _c.lease_until > batch.shared("now"))


def _owned(occurrence_id: str, token: str) -> Any:
    """Still ours: our token, still running, lease not yet expired (DB clock, now)."""
    return and_(_c.occurrence_id == occurrence_id, _c.execution_token == token,
                _c.status == GIVE_UP.only_source, _c.lease_until > db_now_ms())


def begin(conn: Connection, writer: Writer, requests: Sequence[BeginRequest]) -> set[str]:
    """Record that attempt ``len(attempts)`` of each execution starts now, and extend its lease;
    ``requests`` in occurrence-id order. Returns the ids that began: one whose lease is lost
    (expired, taken over, settled) is left unchanged and missing, and its handler must not run.
    Nothing is counted here: a first attempt's fire lateness is counted when its ownership ends
    (``first_lateness``), so that the begin on the path of every start writes the one row."""
    ids = [r.occurrence_id for r in requests]
    batch = Batch(conn).listed("tokens", [r.token for r in requests]).rows(
        _c.occurrence_id, {r.occurrence_id: {
            "execution_token": r.token, "attempt": len(r.attempts), "attempts": json_attempts(r.attempts),
        } for r in requests}, _BEGIN_COLUMNS, _ownership())
    begun = set(owner_write(conn, OWNED, ids, lambda: update(executions).where(_owned_batch(batch)).values(
        attempt=batch.value("attempt"), attempts=batch.value("attempts"),
        lease_until=db_now_ms() + writer.lease_ms, updated_at=touch(conn)), batch.params, writer.statements, "begin"))
    return begun


def renew(conn: Connection, writer: Writer, tokens: Sequence[str]) -> set[str]:
    """Extend the leases of the writer's running executions; returns the tokens that are LOST.

    Only rows with one of ``tokens``, still running and not yet expired are extended. No lock
    first (unlike the other owner writes): a renewal that waited on a lock and lands after its
    deadline harms nobody, because any takeover or settlement in between changed the row (token
    or status), which makes PostgreSQL re-check this WHERE and skip the row; and locking every
    owned row at once would queue all of this node's runners behind it.
    """
    alive = and_(_c.execution_token.in_(tokens), _c.status == RENEW.only_source, _c.lease_until > db_now_ms())
    renewed = conn.execute(update(executions).where(alive).values(lease_until=db_now_ms() + writer.lease_ms)).rowcount
    if renewed == len(tokens):
        return set()
    return set(tokens) - set(conn.execute(select(_c.execution_token).where(
        _c.execution_token.in_(tokens), _c.status == RENEW.only_source, _c.lease_until > db_now_ms())).scalars())


def give_up(conn: Connection, occurrence_id: str, token: str) -> bool:
    """Let the lease expire now, so that another node may take over at once (close of an
    idempotent run with attempts left); False when the row is not ours any more."""
    return bool(owner_write(conn, OWNED, [occurrence_id], lambda: update(executions).where(
        _owned(occurrence_id, token)).values(lease_until=db_now_ms() - 1, updated_at=touch(conn))))


def finish(conn: Connection, writer: Writer, requests: Sequence[FinishRequest], project: bool) -> FinishResult:
    """Terminal commits of many executions, in the caller's transaction; ``requests`` in
    occurrence-id order: status, reason and every attempt, the slot released unless
    ``release_slot`` is False (an unknown outcome keeps it), each counted (``store/totals.py``).
    A row we no longer own is left unchanged and missing from ``committed``.

    With ``project`` the rows with attempts are written ``persisted`` at once: their logs are
    inserted in this transaction, and a projection that fails raises ``ProjectionFailedError``
    (the caller rolls back and writes them ``pending``, see ``ExecutionRepository.finish_many``).
    """
    ids = [r.occurrence_id for r in requests]
    logged = LogPersistenceStatus.PERSISTED if project else LogPersistenceStatus.PENDING
    batch = Batch(conn).listed("tokens", [r.token for r in requests]).rows(
        _c.occurrence_id, {r.occurrence_id: {
            "execution_token": r.token, "status": FINISH.check(r.status), "reason": r.reason,
            "attempt": len(r.attempts), "attempts": json_attempts(r.attempts),
            "log_persistence": logged if r.attempts else None,
        } for r in requests}, _FINISH_COLUMNS, _ownership())
    won = set(owner_write(conn, OWNED, ids, lambda: update(executions).where(_owned_batch(batch)).values(
        status=batch.value("status"), reason=batch.value("reason"), attempts=batch.value("attempts"),
        attempt=batch.value("attempt"), log_persistence=batch.value("log_persistence"),
        lease_until=None, updated_at=touch(conn)), batch.params, writer.statements, "finish"))
    tally = Tally()
    for r in (r for r in requests if r.occurrence_id in won):
        tally.execution(r.execution.task_id, r.status)
        if (late := first_lateness(r.execution, r.attempts)) is not None:
            tally.lateness(*late)
    tally.write(conn)
    released = [(r.execution.task_id, r.occurrence_id) for r in requests if r.occurrence_id in won and r.release_slot]
    if released:
        release_slots(conn, writer.statements, released)
    persisted: frozenset[str] = frozenset()
    if project:
        done = [replace(r.execution, status=FINISH.check(r.status), reason=r.reason, attempts=tuple(r.attempts),
                        log_persistence=LogPersistenceStatus.PENDING)
                for r in requests if r.occurrence_id in won and r.attempts]
        try:
            persisted = frozenset(project_logs(conn, done, writer.statements, mark=False))
        except Exception as exc:
            if is_retryable(exc):
                raise  # lock contention: the whole transaction is run again
            raise ProjectionFailedError(f"{type(exc).__name__}: {exc}") from exc
    return FinishResult(frozenset(won), persisted)
