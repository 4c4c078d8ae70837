"""Rows no node owns: ``queued`` occurrences waiting for a node able to run them (a handed-over
manual trigger, a catch-up run, an operator's backfill) or for their task's slot (a buffered cron
occurrence), and ``missed`` ones that no node ran (docs/semantics.md, "Routing and misses")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions
from scheduler_core.model import Execution
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.dialect import insert_ignore_many
from scheduler_core.store.journal.claims import skip
from scheduler_core.store.journal.rows import (
    Backfilled,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Missed,
    Writer,
    identity,
    new_row,
)
from scheduler_core.store.journal.run_limits import SPENT_REASON, count_runs, limited, lock_limits, over_limit
from scheduler_core.store.journal.slots import take_slots
from scheduler_core.store.journal.transitions import BACKFILL, CLAIM_QUEUED, ENQUEUE, MISS, REQUEUE, SETTLE_QUEUED
from scheduler_core.store.totals import Tally, lock_tasks
from scheduler_core.store.transactions import one_row


def enqueue(conn: Connection, requests: Sequence[ClaimRequest]) -> None:
    """Journal occurrences as ``queued``: unowned, no slot, for a node able to run them (an
    occurrence id journaled already -- a repeated idempotency key, a minute another node caught
    up -- is left as it is)."""
    queued = ENQUEUE.only_target
    _insert(conn, [{**identity(r, None), "status": queued, "reason": None, "missed_until": None,
                    "missed_count": None} for r in requests])


def backfill(conn: Connection, requests: Sequence[ClaimRequest]) -> Backfilled:
    """Queue past cron occurrences an operator asked to run (trigger ``backfill``), in the
    caller's transaction. A minute not journaled yet gets a new ``queued`` row; one journaled
    ``missed`` (one minute, not a summary row) or ``skipped`` never ran, so its row becomes
    ``queued`` for the backfill (CAS on that status); any other row is left as it is: a minute
    that ran, runs or waits is never run again. The tasks' lock rows are taken first
    (``lock_tasks``): two backfills of one task queue there, and each reads what the other
    did; a claim of these past minutes cannot come in between (its occurrence id is journaled
    before it is due, or never)."""
    lock_tasks(conn, {r.task_id for r in requests})
    found = {row.occurrence_id: row for row in conn.execute(
        select(executions.c.occurrence_id, executions.c.status, executions.c.missed_until)
        .where(executions.c.occurrence_id.in_([r.occurrence_id for r in requests])))}
    new = [r for r in requests if r.occurrence_id not in found]
    again = [r for r in requests if r.occurrence_id in found and found[r.occurrence_id].status in BACKFILL.source
             and found[r.occurrence_id].missed_until is None]
    _insert(conn, [{**identity(r, None), "status": ENQUEUE.only_target, "reason": None, "missed_until": None,
                    "missed_count": None} for r in new])
    converted: list[str] = []
    for r in again:  # one statement a row: each has its own minute's row (at most BACKFILL_MAX a call)
        if one_row(conn.execute(update(executions).where(
                executions.c.occurrence_id == r.occurrence_id, executions.c.status.in_(BACKFILL.source),
                executions.c.missed_until.is_(None),
        ).values(**identity(r, None), **new_row(db_now_ms()), status=BACKFILL.only_target, reason=None,
                 missed_count=None))):  # as a new row: unowned, no attempt, created now
            converted.append(r.occurrence_id)
    done = {r.occurrence_id for r in new} | set(converted)
    return Backfilled([r.occurrence_id for r in new], converted,
                      [r.occurrence_id for r in requests if r.occurrence_id not in done])


def miss(conn: Connection, missed: Sequence[Missed]) -> set[str]:
    """Journal occurrences as ``missed`` (terminal, no slot). An occurrence id journaled already
    is left as it is, so a late or repeated scan never journals a minute twice. Returns the ids
    inserted, each counted (``store/totals.py``) in this transaction, exactly."""
    rows = [{**identity(m.request, None), "status": MISS.only_target, "reason": m.reason, "missed_until": m.until,
             "missed_count": m.count} for m in missed]
    return set(_insert(conn, rows, count_missed=True))


def claim_queued(conn: Connection, writer: Writer, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
    """Own queued rows and take their tasks' slots, in the caller's transaction; ``requests`` in
    occurrence-id order.

    Each row still ``queued`` becomes ``running`` under the request's token and the writer's
    lease; one that is not any more (another node took it) is ``exists``. Whose slot is busy: a
    manual trigger is ``skipped`` (``slot_busy``), as its claim on the triggering node would have
    been; a catch-up or backfill run, or a cron occurrence its overlap policy buffered (``claims.buffer``), is
    queued again (``waiting``: it waits for the slot, in order); a jittered cron occurrence waits
    if its task's overlap policy buffers, and is ``skipped`` (``slot_busy``) if not. A catch-up run or buffered cron
    occurrence of a task whose ``max_runs`` is spent is ``skipped`` (``max_runs``); a seat counts
    a run (``run_limits``).
    """
    limits = lock_limits(conn, limited(requests))  # first, as a claim takes them (claims.claim)
    owned = [r for r in requests if _own(conn, writer, r)]
    spent = over_limit(limits, owned)
    won = [r for r in owned if r not in spent]
    won.sort(key=lambda r: r.scheduled_minute or 0)  # a task's slot goes to its earliest minute
    seated = take_slots(conn, writer.statements, won)
    count_runs(conn, limits, [r for r in won if r.occurrence_id in seated])
    waiting = [r for r in won if r.occurrence_id not in seated and _waits(r)]
    skipped = [r for r in won if r.occurrence_id not in seated and not _waits(r)]
    requeue(conn, waiting)
    skip(conn, skipped)
    skip(conn, spent, SPENT_REASON)
    outcomes = {r.occurrence_id: ClaimOutcome.CLAIMED for r in won}
    outcomes.update({r.occurrence_id: ClaimOutcome.WAITING for r in waiting})
    outcomes.update({r.occurrence_id: ClaimOutcome.SKIPPED for r in [*skipped, *spent]})
    return [ClaimResult(r.occurrence_id, outcomes.get(r.occurrence_id, ClaimOutcome.EXISTS)) for r in requests]


def _waits(r: ClaimRequest) -> bool:
    """Whether a queued row whose slot is held waits on for it: a catch-up or backfill run, a
    buffered cron occurrence; a jittered one only when its task's overlap policy lets it wait
    (``waiting_limit``: it meets the held slot at its delayed start as at its minute)."""
    if r.trigger == Trigger.CRON and r.not_before is not None:
        return r.waiting_limit > 0
    return r.trigger in (Trigger.CATCHUP, Trigger.CRON, Trigger.BACKFILL)


def _own(conn: Connection, writer: Writer, r: ClaimRequest) -> bool:
    now = db_now_ms()
    return one_row(conn.execute(update(executions).where(
        executions.c.occurrence_id == r.occurrence_id, executions.c.status == CLAIM_QUEUED.only_source,
    ).values(status=CLAIM_QUEUED.only_target, reason=None, execution_token=r.token, owner_node=writer.node_id,
             lease_until=now + writer.lease_ms, updated_at=now)))


def requeue(conn: Connection, requests: Sequence[ClaimRequest]) -> None:
    """Catch-up runs, backfill runs and buffered cron occurrences this transaction owned whose task's slot is
    held: ``queued`` again, unowned, as they were (they keep their place: ``created_at`` is
    unchanged; a cron occurrence its reason, ``buffered``)."""
    if requests:
        buffered = case((executions.c.trigger == Trigger.CRON, "buffered"), else_=None)
        conn.execute(update(executions).where(executions.c.occurrence_id.in_([r.occurrence_id for r in requests]))
                     .values(status=REQUEUE.only_target, reason=buffered, execution_token=None, owner_node=None,
                             lease_until=None))


def settle_queued(conn: Connection, execution: Execution, status: ExecutionStatus, reason: str) -> bool:
    """End a queued row that no node will run (``missed`` / ``no_capable_node``, or
    ``interrupted`` / ``deleted``), counted; False when it is not queued any more."""
    status = SETTLE_QUEUED.check(status)
    settled = one_row(conn.execute(update(executions).where(
        executions.c.occurrence_id == execution.occurrence_id, executions.c.status == SETTLE_QUEUED.only_source,
    ).values(status=status, reason=reason, updated_at=db_now_ms())))
    if settled:
        tally = Tally().execution(execution.task_id, status)
        tally.missed(execution.task_id, 1 if status == ExecutionStatus.MISSED else 0).write(conn)
    return settled


def _insert(conn: Connection, rows: list[dict[str, Any]], count_missed: bool = False) -> dict[str, None]:
    """Insert-or-ignore unowned rows; the ids inserted (MySQL, without ``count_missed``: every id
    of the same status and reason, as it cannot tell). ``count_missed``: the inserted rows are
    counted in the same transaction, exactly."""
    mysql = dialect_kind(conn) == "mysql"
    todo = _unjournaled(conn, rows) if mysql and count_missed else rows
    inserted = insert_ignore_many(conn, executions, todo, new_row(db_now_ms())) if todo else set()
    if inserted is None or (mysql and todo):
        done = dict.fromkeys(_inserted_mysql(conn, todo))
    else:
        done = dict.fromkeys(str(i) for i in inserted)
    if count_missed:
        tally = Tally()
        for r in (r for r in todo if r["occurrence_id"] in done):
            tally.execution(r["task_id"], r["status"]).missed(r["task_id"], r["missed_count"] or 1)
        tally.write(conn)
    return done


def _unjournaled(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MySQL, before journaling missed rows: the rows not journaled yet, read after this
    transaction has locked the tasks' totals (``lock_tasks``). Two nodes journaling the same
    minutes queue there, so the second one reads the first one's rows here and leaves them out:
    what its insert then adds is its own (``_inserted_mysql`` drops the rows a claim journaled
    meanwhile), and each minute is counted once."""
    lock_tasks(conn, {r["task_id"] for r in rows})
    ids = [r["occurrence_id"] for r in rows]
    found = set(conn.execute(select(executions.c.occurrence_id).where(executions.c.occurrence_id.in_(ids)))
                .scalars())
    return [r for r in rows if r["occurrence_id"] not in found]


def _inserted_mysql(conn: Connection, rows: list[dict[str, Any]]) -> list[str]:
    """MySQL cannot say which rows an insert-or-ignore inserted: those whose status and reason
    are what was written (an older row of another kind differs)."""
    ids = [r["occurrence_id"] for r in rows]
    found = {row[0]: (row[1], row[2]) for row in conn.execute(
        select(executions.c.occurrence_id, executions.c.status, executions.c.reason)
        .where(executions.c.occurrence_id.in_(ids)))}
    return [r["occurrence_id"] for r in rows if found.get(r["occurrence_id"]) == (r["status"], r["reason"])]
