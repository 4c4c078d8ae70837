"""Journal retention: old finished occurrences leave the journal, with their attempt logs, in
short batches (docs/semantics.md, "Journal retention"), each deleted by the journal's transition
``delete_retained``.

A row is deleted only when all of these hold, checked again by the DELETE itself:

- its status is final and settled: success, failed, interrupted, discarded, skipped or missed
  (never queued, running or unknown -- an unknown row waits for an operator's verdict);
- its last change (``updated_at``) is older than ``days`` by the DB clock;
- it has no idempotency key, or its key's period is over too: ``max(days, KEY_DAYS_MIN)`` days;
- no slot points at it, and its logs are not ``pending`` (a repair still owes them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import and_, or_, select
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions
from scheduler_core.store.journal import deletable, delete_retained
from scheduler_core.store.journal.retention import DAY_MS, KEY_DAYS_MIN, key_days
from scheduler_core.store.journal.transitions import DELETE_RETAINED
from scheduler_core.store.transactions import write

__all__ = ["BATCH_ROWS", "DELETABLE", "KEY_DAYS_MIN", "JournalRetention", "PruneResult", "key_days"]

# MariaDB's optimizer, its statistics refreshed after a large delete, may read the whole table and
# sort it for every batch (seen at 900 rows left of 12,000); the walk is in this index's order
CREATION_ORDER_INDEX = "ix_executions_created_at_occurrence_id"
BATCH_ROWS = 500  # journal rows one transaction deletes at most (bounds statement size and lock time)
DELETABLE = DELETE_RETAINED.source  # the statuses a deletable row may have


@dataclass(frozen=True)
class PruneResult:
    journal: int = 0  # journal rows deleted
    logs: int = 0  # their attempt log rows deleted with them
    more: bool = False  # stopped at max_batches before its pass was over


@dataclass
class _Batch:
    deleted: int = 0
    logs: int = 0
    last: tuple[int, str] | None = None  # (created_at, occurrence_id) of the last row it read
    end: bool = False  # it read to the end of the pass


class JournalRetention:
    """Deletes in passes. A pass walks the journal in creation order through the
    ``(created_at, occurrence_id)`` index, oldest first, up to the cutoff (a row changes only after
    it is created, so a row last changed before the cutoff was created before it); each batch
    reads on after the last row the batch before it read. So a batch never passes again over the
    rows earlier batches deleted, which stay in the table and its indexes until the database cleans
    them up (PostgreSQL's vacuum, InnoDB's purge), nor over young rows: a read with no order,
    which PostgreSQL answered with a sequential scan from wherever it chose to start, could pass
    over all of them on every batch. Creation order is also about the order rows lie in the table,
    so a batch's deletions fall on few pages, whatever their statuses. The position is kept
    between calls (housekeeping runs a few batches a tick) and dropped when the pass is over; the
    next pass starts from the oldest row again, so a row held back (a slot pointed at it, its logs
    were pending) goes once it is free."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()  # the node's housekeeping and prune_journal() share the position
        self._after: tuple[int, str] | None = None  # (created_at, occurrence_id) this pass read last

    def prune(self, days: int, max_batches: int = 20, batch_rows: int | None = None) -> PruneResult:
        """Delete deletable journal rows (module docstring) and their logs, ``batch_rows`` a
        transaction, at most ``max_batches`` transactions; ``more`` when the pass is not over."""
        journal = log_rows = 0
        batch_rows = BATCH_ROWS if batch_rows is None else batch_rows
        with self._lock:
            for _ in range(max_batches):
                # the position moves only once its batch has committed (a retried or failed
                # transaction reads again from where the last committed batch ended)
                batch = write(self.engine, lambda conn: self._batch(conn, days, batch_rows))
                journal += batch.deleted
                log_rows += batch.logs
                self._after = None if batch.end else batch.last  # a pass over: the next starts afresh
                if batch.end:
                    return PruneResult(journal, log_rows, False)
            return PruneResult(journal, log_rows, True)

    def _batch(self, conn: Connection, days: int, batch_rows: int) -> _Batch:
        """One transaction: the next ``batch_rows`` deletable rows in creation order after this
        pass's position, deleted by primary key with their logs."""
        c = executions.c
        condition = and_(c.created_at < db_now_ms() - days * DAY_MS, deletable(days, walk=True))
        if self._after is not None:  # the range start (>=) is what an index seeks to; the OR breaks ties
            created_at, occurrence_id = self._after
            condition = and_(condition, c.created_at >= created_at,
                             or_(c.created_at > created_at, c.occurrence_id > occurrence_id))
        hint = f"FORCE INDEX ({CREATION_ORDER_INDEX})"  # "mariadb" for an engine made with that dialect name
        read = (select(c.occurrence_id, c.created_at).where(condition).order_by(c.created_at, c.occurrence_id)
                .limit(batch_rows).with_hint(executions, hint, "mysql").with_hint(executions, hint, "mariadb"))
        rows = conn.execute(read).all()
        batch = _Batch(end=len(rows) < batch_rows)
        if not rows:
            return batch
        batch.last = (int(rows[-1].created_at), str(rows[-1].occurrence_id))
        # the DELETE checks every condition again: a row changed since the read stays
        deleted = delete_retained(conn, [str(row.occurrence_id) for row in rows], days)
        batch.deleted, batch.logs = deleted.journal, deleted.logs
        return batch
