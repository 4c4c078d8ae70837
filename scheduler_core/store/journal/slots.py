"""A task's one slot (``slots``, docs/semantics.md S1): taken by a claim, handed to a new owner
by a takeover, released by a terminal outcome that frees it. Only the journal's transitions
call these, in their own transactions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Update

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import slots
from scheduler_core.store.dialect import Batch, StatementCache, insert_ignore_many, run
from scheduler_core.store.journal.rows import ClaimRequest

# MySQL: pauses before a free slot that another transaction has locked is tried again (``_lock_slots``):
# about 0.8 s in all, as a statement passing over the row can take that long on a loaded host (75 ms
# was too short: a full test run saw two occurrences of a 2-node boundary skipped, their slots free)
SLOT_RETRY_PAUSES_S = (0.005, 0.02, 0.05, 0.1, 0.2, 0.4)


def take_slots(conn: Connection, cache: StatementCache, won: Sequence[ClaimRequest]) -> set[str]:
    """Take the free slots for the first won occurrence of each task; returns the occurrence ids
    now seated in their task's slot.

    A claim never waits for whoever holds a slot row -- an owner frozen inside its terminal
    commit (GC pause, VM freeze), its slot release written but not committed, would stall this
    claim, and with it the tick and every other task. The slot's last committed state decides:
    PostgreSQL's UPDATE matches on its snapshot, where such a slot is still held; InnoDB locks
    every row its UPDATE looks up by key (no semi-consistent read for unique lookups), so on
    MySQL the free slots are locked first with SKIP LOCKED, a locked one counting as busy.
    Existing slot rows are never met by an insert-or-ignore, which would wait for them as well.
    """
    first: dict[str, ClaimRequest] = {}
    for r in won:
        first.setdefault(r.task_id, r)
    if not first:
        return set()
    task_ids = sorted(first)
    if dialect_kind(conn) == "mysql":
        rows = _lock_slots(conn, task_ids)
        free = [t for t in task_ids if t in rows and rows[t] is None]
        if free:  # locked by us: the UPDATE takes every one of them
            run(conn, *_take_free_slots(conn, cache, {t: first[t] for t in free}))
        seated, unseen = set(free), [t for t in task_ids if t not in rows]  # unseen: locked, or no row
    else:
        seated = set(run(conn, *_take_free_slots(conn, cache, {t: first[t] for t in task_ids})).scalars().all())
        unseen = [t for t in task_ids if t not in seated]  # busy, or no row
    if unseen:  # (rarely) no slot row at all: a plain read tells them apart
        present = set(conn.execute(select(slots.c.task_id).where(slots.c.task_id.in_(unseen))).scalars().all())
        missing = [first[t] for t in unseen if t not in present]
        if missing:
            seated |= _seat_in_new_slots(conn, cache, missing)
    return {first[t].occurrence_id for t in seated}


def _lock_slots(conn: Connection, task_ids: list[str]) -> dict[str, str | None]:
    """MySQL: lock the slot rows of ``task_ids`` that no one else has locked (SKIP LOCKED);
    their holders, by task.

    A row locked by another transaction is not always held: InnoDB also locks, for the length
    of a statement, rows that a locking statement only passes over (an UPDATE of the slots
    planned as a scan, say). A row locked now whose last committed state is free is therefore
    tried again, after ``SLOT_RETRY_PAUSES_S`` (at most about 0.8 s in all), before it counts as
    busy; a row whose committed state is held counts as busy at once, so a claim still never
    waits for an owner frozen inside its terminal commit."""
    def lock(ids: list[str]) -> dict[str, str | None]:
        found = conn.execute(select(slots.c.task_id, slots.c.occurrence_id).where(slots.c.task_id.in_(ids))
                             .with_for_update(skip_locked=True)).all()
        return {task_id: holder for task_id, holder in found}

    rows = lock(task_ids)
    for pause in SLOT_RETRY_PAUSES_S:
        locked = [t for t in task_ids if t not in rows]
        if not locked:
            break
        committed = {task_id: holder for task_id, holder in conn.execute(  # no lock: the last commit
            select(slots.c.task_id, slots.c.occurrence_id).where(slots.c.task_id.in_(locked))).all()}
        free_now = [t for t in locked if t in committed and committed[t] is None]
        if not free_now:
            break
        time.sleep(pause)
        rows.update(lock(free_now))
    return rows


def _take_free_slots(conn: Connection, cache: StatementCache,
                     claims: dict[str, ClaimRequest]) -> tuple[Any, dict[str, Any]]:
    """The statement (and its parameters) seating each claim in its task's slot if that is
    free; RETURNING the task ids seated, except on MySQL."""
    batch = Batch(conn).rows(slots.c.task_id, {t: {"occurrence_id": r.occurrence_id, "execution_token": r.token}
                                               for t, r in claims.items()},
                             {"occurrence_id": slots.c.occurrence_id, "execution_token": slots.c.execution_token})

    def take() -> Update:
        taken = (update(slots).where(batch.matches(), slots.c.occurrence_id.is_(None))
                 .values(occurrence_id=batch.value("occurrence_id"),
                         execution_token=batch.value("execution_token"), updated_at=db_now_ms()))
        return taken if dialect_kind(conn) == "mysql" else taken.returning(slots.c.task_id)

    return (cache.driver("take_slots", take) if batch.cacheable else take()), batch.params


def _seat_in_new_slots(conn: Connection, cache: StatementCache, claims: list[ClaimRequest]) -> set[str]:
    """A task's slot row is made with the task; this covers one missing for any reason (the row
    is created already held by the claim). Returns the task ids seated."""
    rows = [{"task_id": r.task_id, "occurrence_id": r.occurrence_id, "execution_token": r.token} for r in claims]
    inserted = insert_ignore_many(conn, slots, rows, {"updated_at": db_now_ms()}, cache, "new_slots")
    if inserted is not None:
        return {str(t) for t in inserted}
    holders = dict(conn.execute(select(slots.c.task_id, slots.c.occurrence_id)
                                .where(slots.c.task_id.in_([r.task_id for r in claims]))).all())
    return {r.task_id for r in claims if holders.get(r.task_id) == r.occurrence_id}


def release_slot(conn: Connection, task_id: str, occurrence_id: str) -> None:
    """Free the task's slot if this occurrence holds it."""
    conn.execute(update(slots).where(slots.c.task_id == task_id, slots.c.occurrence_id == occurrence_id)
                 .values(occurrence_id=None, execution_token=None, updated_at=db_now_ms()))


def release_slots(conn: Connection, cache: StatementCache, held: Sequence[tuple[str, str]]) -> None:
    """``release_slot`` for many (task, occurrence) pairs in one statement. An occurrence belongs to
    one task: the pairs need no CASE."""
    freed = (Batch(conn).listed("task_ids", sorted({task_id for task_id, _ in held}))
             .listed("ids", [occurrence_id for _, occurrence_id in held]))

    def build() -> Any:
        return (update(slots)
                .where(freed.one_of(slots.c.task_id, "task_ids"), freed.one_of(slots.c.occurrence_id, "ids"))
                .values(occurrence_id=None, execution_token=None, updated_at=db_now_ms()))

    run(conn, cache.driver("release_slots", build) if freed.cacheable else build(), freed.params)


def hand_slot(conn: Connection, task_id: str, occurrence_id: str, token: str) -> None:
    """The slot this occurrence holds takes its new owner's token (a takeover)."""
    conn.execute(update(slots).where(slots.c.task_id == task_id, slots.c.occurrence_id == occurrence_id)
                 .values(execution_token=token, updated_at=db_now_ms()))
