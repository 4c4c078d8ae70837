"""Claims: an occurrence journaled ``running`` under its claimer's lease and seated in its task's
slot, or ``skipped`` when the slot is held (docs/semantics.md, section 3)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.dialect import Batch, insert_ignore_many, run
from scheduler_core.store.journal.rows import ClaimOutcome, ClaimRequest, ClaimResult, Writer, identity, new_row
from scheduler_core.store.journal.slots import take_slots
from scheduler_core.store.journal.transitions import CLAIM, SKIP
from scheduler_core.store.totals import Tally

Journaled = tuple[str | None, ExecutionStatus, int]  # an existing row's token, status and attempt


def claim(conn: Connection, writer: Writer, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
    """Journal each occurrence and take its task's slot, in the caller's transaction;
    ``requests`` in occurrence-id order, so that concurrent claimers lock alike.

    - An occurrence id that is already journaled (by anyone) is left alone: ``exists``.
    - New rows start ``running`` with the request's token and ``lease_until = db_now + lease``.
    - A new row whose task slot is held becomes ``skipped`` (``skip``).
    - A ``retry`` request whose row is journaled with its own token is an earlier claim of
      ours whose answer was lost (a dropped connection after COMMIT): ``claimed`` again while
      no attempt began (see ``_earlier_outcome``). The caller retries a failed claim with the
      same token, which no other claimer can hold.
    """
    earlier = _journaled(conn, writer, requests) if dialect_kind(conn) != "sqlite" else {}
    fresh = [r for r in requests if r.occurrence_id not in earlier]
    won: list[ClaimRequest] = []
    if fresh:
        inserted = insert_ignore_many(conn, executions, [identity(r, r.token) for r in fresh],
                                      {**new_row(db_now_ms(), writer), "status": CLAIM.only_target, "reason": None},
                                      writer.statements, "claim")
        if inserted is not None:  # the rows this statement inserted are the ones we won
            won = [r for r in fresh if r.occurrence_id in inserted]
            others = [r for r in fresh if r.occurrence_id not in inserted]
            if others:  # SQLite (no read first): journaled before, perhaps by our own claim
                earlier.update(_journaled(conn, writer, others))
        else:  # MySQL: the rows read first were committed; these were inserted just now
            tokens = {oid: token for oid, (token, _, _) in _journaled(conn, writer, fresh).items()}
            won = [r for r in fresh if tokens.get(r.occurrence_id) == r.token]
    seated = take_slots(conn, writer.statements, won)
    skipped = [r for r in won if r.occurrence_id not in seated]
    skip(conn, skipped)
    outcomes = {r.occurrence_id: ClaimOutcome.CLAIMED for r in won}
    outcomes.update({r.occurrence_id: ClaimOutcome.SKIPPED for r in skipped})
    for r in requests:
        if r.occurrence_id in earlier:
            outcomes[r.occurrence_id] = _earlier_outcome(r, *earlier[r.occurrence_id])
    return [ClaimResult(r.occurrence_id, outcomes.get(r.occurrence_id, ClaimOutcome.EXISTS)) for r in requests]


def skip(conn: Connection, requests: Sequence[ClaimRequest]) -> None:
    """Occurrences this transaction journaled ``running`` whose task's slot is held: ``skipped``
    (reason ``slot_busy``), with no lease, each counted (``store/totals.py``). One statement."""
    if not requests:
        return
    skipped = SKIP.only_target
    conn.execute(update(executions).where(executions.c.occurrence_id.in_([r.occurrence_id for r in requests]))
                 .values(status=skipped, reason="slot_busy", lease_until=None, updated_at=db_now_ms()))
    Tally().executions((r.task_id, skipped) for r in requests).write(conn)


def _earlier_outcome(r: ClaimRequest, token: str | None, status: ExecutionStatus, attempt: int) -> ClaimOutcome:
    """An occurrence journaled before this claim: ``exists``, unless this is a retry and the row
    is the request's own earlier claim (same token) whose COMMIT was applied but whose answer was
    lost -- then it is ours: ``claimed`` while still untouched (running, no attempt begun: nobody
    runs it, no runner of ours was made for it), else what it became (``skipped``)."""
    if not r.retry or token != r.token:
        return ClaimOutcome.EXISTS
    if status == ExecutionStatus.RUNNING and attempt == 0:
        return ClaimOutcome.CLAIMED
    return ClaimOutcome.SKIPPED if status == ExecutionStatus.SKIPPED else ClaimOutcome.EXISTS


def _journaled(conn: Connection, writer: Writer, requests: Sequence[ClaimRequest]) -> dict[str, Journaled]:
    """The requests' occurrences already journaled: token, status and attempt of each (a
    non-locking read).

    Read before inserting (PostgreSQL, MySQL): an insert-or-ignore that meets an existing key
    waits for whoever holds that row -- InnoDB's duplicate-key check waits for any lock on it,
    PostgreSQL's ON CONFLICT for any uncommitted change to it. An owner frozen mid-write (GC
    pause, SIGSTOP, VM freeze) inside its terminal commit would stall this claim -- and with it
    the whole tick -- for as long as it stays frozen. Rows already committed are left out, so the
    INSERT only meets rows being claimed right now. (SQLite serialises writers: there it is read
    only for the rows an insert skipped.)
    """
    batch = Batch(conn).listed("ids", [r.occurrence_id for r in requests])

    def build() -> object:
        return select(executions.c.occurrence_id, executions.c.execution_token, executions.c.status,
                      executions.c.attempt).where(batch.one_of(executions.c.occurrence_id, "ids"))

    query = writer.statements.driver("journaled", build) if batch.cacheable else build()
    return {row[0]: (row[1], ExecutionStatus(row[2]), int(row[3])) for row in run(conn, query, batch.params).all()}
