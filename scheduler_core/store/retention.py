"""Journal retention: old finished occurrences leave the journal, with their attempt logs, in
short batches (docs/semantics.md, "Journal retention").

A row is deleted only when all of these hold, checked again by the DELETE itself:

- its status is final and settled: success, failed, interrupted, discarded, skipped or missed
  (never queued, running or unknown -- an unknown row waits for an operator's verdict);
- its last change (``updated_at``) is older than ``days`` by the DB clock;
- it has no idempotency key, or its key's period is over too: ``max(days, KEY_DAYS_MIN)`` days;
- no slot points at it, and its logs are not ``pending`` (a repair still owes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, exists, or_, select
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions, logs, slots
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.transactions import write

DAY_MS = 86_400_000
KEY_DAYS_MIN = 30  # an idempotency key answers with its occurrence for at least this many days
BATCH_ROWS = 500  # journal rows one transaction deletes at most (bounds statement size and lock time)
DELETABLE = (ExecutionStatus.SUCCESS, ExecutionStatus.FAILED, ExecutionStatus.INTERRUPTED,
             ExecutionStatus.DISCARDED, ExecutionStatus.SKIPPED, ExecutionStatus.MISSED)


def key_days(days: int) -> int:
    """How long a keyed manual trigger keeps its idempotency when journal rows live ``days``."""
    return max(days, KEY_DAYS_MIN)


@dataclass(frozen=True)
class PruneResult:
    journal: int = 0  # journal rows deleted
    logs: int = 0  # their attempt log rows deleted with them
    more: bool = False  # stopped at max_batches with rows still to delete


class JournalRetention:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @staticmethod
    def _deletable(days: int) -> Any:
        c = executions.c
        unkeyed_cutoff = db_now_ms() - days * DAY_MS
        keyed_cutoff = db_now_ms() - key_days(days) * DAY_MS
        slot_points_here = exists().where(slots.c.occurrence_id == c.occurrence_id)
        return and_(c.status.in_([str(s) for s in DELETABLE]), c.updated_at < unkeyed_cutoff,
                    or_(c.idempotency_key.is_(None), c.updated_at < keyed_cutoff),
                    or_(c.log_persistence.is_(None), c.log_persistence != "pending"), ~slot_points_here)

    def prune(self, days: int, max_batches: int = 20, batch_rows: int | None = None) -> PruneResult:
        """Delete deletable journal rows (module docstring) and their logs, ``batch_rows`` a
        transaction, at most ``max_batches`` transactions; each batch is found through the
        (status, updated_at) index and deleted by primary key."""
        journal = log_rows = 0
        batch_rows = BATCH_ROWS if batch_rows is None else batch_rows
        for _ in range(max_batches):
            deleted, deleted_logs = write(self.engine, lambda conn: self._batch(conn, days, batch_rows))
            journal += deleted
            log_rows += deleted_logs
            if deleted < batch_rows:
                return PruneResult(journal, log_rows, False)
        return PruneResult(journal, log_rows, True)

    def _batch(self, conn: Connection, days: int, batch_rows: int) -> tuple[int, int]:
        ids = list(conn.execute(select(executions.c.occurrence_id).where(self._deletable(days))
                                .limit(batch_rows)).scalars())
        if not ids:
            return 0, 0
        # the DELETE checks every condition again: a row changed since the read stays
        deleted = conn.execute(delete(executions).where(executions.c.occurrence_id.in_(ids),
                                                        self._deletable(days))).rowcount
        gone = ids if deleted == len(ids) else list(set(ids) - set(conn.execute(
            select(executions.c.occurrence_id).where(executions.c.occurrence_id.in_(ids))).scalars()))
        log_rows = conn.execute(delete(logs).where(logs.c.occurrence_id.in_(gone))).rowcount if gone else 0
        return int(deleted), int(log_rows)
