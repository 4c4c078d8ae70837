"""Claims: an occurrence journaled ``running`` under its claimer's lease and seated in its task's
slot; when the slot is held, ``skipped``, or ``queued`` to wait for it when the task's overlap
policy buffers (docs/semantics.md, section 3)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import case, func, select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.dialect import Batch, insert_ignore_many, run
from scheduler_core.store.journal.rows import ClaimOutcome, ClaimRequest, ClaimResult, Writer, identity, new_row
from scheduler_core.store.journal.run_limits import SPENT_REASON, count_runs, lock_limits, over_limit
from scheduler_core.store.journal.slots import take_slots
from scheduler_core.store.journal.transitions import BUFFER, CLAIM, DELAY, SKIP
from scheduler_core.store.totals import Tally, lock_tasks

JITTER_REASON = "jitter"
Journaled = tuple[str | None, ExecutionStatus, int]  # an existing row's token, status and attempt


def claim(conn: Connection, writer: Writer, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
    """Journal each occurrence and take its task's slot, in the caller's transaction;
    ``requests`` in occurrence-id order, so that concurrent claimers lock alike.

    - An occurrence id that is already journaled (by anyone) is left alone: ``exists``.
    - New rows start ``running`` with the request's token and ``lease_until = db_now + lease``.
    - A new row whose task slot is held becomes ``skipped`` (``skip``), or, when its request may
      wait (``waiting_limit``, the task's overlap policy), ``queued`` behind the others waiting
      (``buffer``); beyond the limit, ``skipped`` (``buffer_full``). While some wait, a new
      occurrence of the task waits behind them even if the slot is free: they start in order.
    - A jittered cron occurrence (``not_before``) is journaled ``queued`` until its delayed start
      (``delay``): it takes no slot now, and is claimed from the queue (``handoff.claim_queued``).
    - A scheduled occurrence of a task whose ``max_runs`` is spent is ``skipped`` (``max_runs``);
      the seat that reaches the limit disables the task (``run_limits``).
    - A ``retry`` request whose row is journaled with its own token is an earlier claim of
      ours whose answer was lost (a dropped connection after COMMIT): ``claimed`` again while
      no attempt began (see ``_earlier_outcome``). The caller retries a failed claim with the
      same token, which no other claimer can hold.
    """
    earlier = _journaled(conn, writer, requests) if dialect_kind(conn) != "sqlite" else {}
    fresh = [r for r in requests if r.occurrence_id not in earlier]
    won: list[ClaimRequest] = []
    buffering = sorted({r.task_id for r in fresh if r.waiting_limit})
    if buffering:  # before the insert, in the order the gap check's missed rows take it (handoff._unjournaled)
        lock_tasks(conn, buffering)
    limits = lock_limits(conn, sorted({r.task_id for r in fresh if r.run_limited}))  # run_limits.py
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
    spent = over_limit(limits, won)
    delayed = [r for r in won if r not in spent and r.not_before is not None]
    delay(conn, delayed)
    won = [r for r in won if r not in spent and r.not_before is None]
    waiting = _waiting(conn, won)
    seated = take_slots(conn, writer.statements, [r for r in won if not waiting.get(r.task_id)])
    count_runs(conn, limits, [r for r in won if r.occurrence_id in seated])
    unseated = [r for r in won if r.occurrence_id not in seated]
    buffered, full = [], []
    for r in sorted(unseated, key=lambda r: r.scheduled_minute or 0):
        if r.waiting_limit and waiting.get(r.task_id, 0) < r.waiting_limit:
            buffered.append(r)
            waiting[r.task_id] = waiting.get(r.task_id, 0) + 1
        elif r.waiting_limit:
            full.append(r)
    buffer(conn, buffered)
    skip(conn, [r for r in unseated if not r.waiting_limit])
    skip(conn, full, "buffer_full")
    skip(conn, spent, SPENT_REASON)
    outcomes = {r.occurrence_id: ClaimOutcome.CLAIMED for r in won}
    outcomes.update({r.occurrence_id: ClaimOutcome.SKIPPED for r in [*unseated, *spent]})
    outcomes.update({r.occurrence_id: ClaimOutcome.WAITING for r in [*buffered, *delayed]})
    for r in requests:
        if r.occurrence_id in earlier:
            outcomes[r.occurrence_id] = _earlier_outcome(r, *earlier[r.occurrence_id])
    return [ClaimResult(r.occurrence_id, outcomes.get(r.occurrence_id, ClaimOutcome.EXISTS)) for r in requests]


def skip(conn: Connection, requests: Sequence[ClaimRequest], reason: str = "slot_busy") -> None:
    """Occurrences this transaction journaled ``running`` whose task's slot is held: ``skipped``
    (reason ``slot_busy``; ``buffer_full`` when as many as the overlap policy allows wait already),
    with no lease, each counted (``store/totals.py``). One statement."""
    if not requests:
        return
    skipped = SKIP.only_target
    conn.execute(update(executions).where(executions.c.occurrence_id.in_([r.occurrence_id for r in requests]))
                 .values(status=skipped, reason=reason, lease_until=None, updated_at=db_now_ms()))
    Tally().executions((r.task_id, skipped) for r in requests).write(conn)


def buffer(conn: Connection, requests: Sequence[ClaimRequest]) -> None:
    """Cron occurrences this transaction journaled ``running`` that wait for their task's slot
    (its overlap policy buffers them): ``queued``, reason ``buffered``, unowned. A node's scan of
    queued rows seats them in minute order once the slot is free (``handoff.claim_queued``)."""
    if requests:
        conn.execute(update(executions).where(executions.c.occurrence_id.in_([r.occurrence_id for r in requests]))
                     .values(status=BUFFER.only_target, reason="buffered", execution_token=None, owner_node=None,
                             lease_until=None, updated_at=db_now_ms()))


def delay(conn: Connection, requests: Sequence[ClaimRequest]) -> None:
    """Jittered cron occurrences this transaction journaled ``running``: ``queued``, reason
    ``jitter``, unowned, not claimed before ``next_attempt_at`` (their delayed start, each its
    own: one statement, the start picked per occurrence id)."""
    if not requests:
        return
    column = executions.c.occurrence_id
    starts = case({r.occurrence_id: r.not_before for r in requests}, value=column)
    conn.execute(update(executions).where(column.in_([r.occurrence_id for r in requests]))
                 .values(status=DELAY.only_target, reason=JITTER_REASON, execution_token=None, owner_node=None,
                         lease_until=None, next_attempt_at=starts, updated_at=db_now_ms()))


def _waiting(conn: Connection, won: Sequence[ClaimRequest]) -> dict[str, int]:
    """For the tasks of ``won`` whose overlap policy buffers: how many cron occurrences wait for
    their slot (``queued``), read after this transaction has locked those tasks (``lock_tasks``),
    so that two claims of one task never both take the last place. Nothing for the others: a
    claim of a task that does not buffer reads and locks nothing more."""
    task_ids = sorted({r.task_id for r in won if r.waiting_limit})
    if not task_ids:
        return {}
    counted = conn.execute(select(executions.c.task_id, func.count()).where(
        executions.c.status == BUFFER.only_target, executions.c.trigger == Trigger.CRON,
        executions.c.task_id.in_(task_ids)).group_by(executions.c.task_id)).all()
    return {task_id: int(count) for task_id, count in counted}


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
