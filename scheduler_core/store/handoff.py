"""The repository of journal rows no node owns: ``queued`` occurrences waiting for a node able to
run them, and ``missed`` ones that no node ran (docs/semantics.md, "Routing and misses"). Each
write is one transaction around a transition of ``store/journal/handoff.py``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from sqlalchemy import func, or_, select

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import audit_log, executions
from scheduler_core.model import Execution
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store import journal
from scheduler_core.store.executions import ExecutionRepository
from scheduler_core.store.journal import Backfilled, ClaimRequest, ClaimResult, Missed, execution_from_row
from scheduler_core.store.teams import audit_team
from scheduler_core.store.transactions import read, write

__all__ = ["INSERT_CHUNK", "Backfilled", "HandoffRepository", "Missed"]

INSERT_CHUNK = 500  # rows per insert transaction


class HandoffRepository:
    """Writes of journal rows without an owner, as the node of ``executions`` (its ``Writer``:
    node id and lease for the rows it claims)."""

    def __init__(self, executions_repo: ExecutionRepository) -> None:
        self.engine = executions_repo.engine
        self.writer = executions_repo.writer

    def enqueue(self, requests: Sequence[ClaimRequest]) -> None:
        """Journal occurrences as ``queued`` (``journal.enqueue``), ``INSERT_CHUNK`` a transaction."""
        for start in range(0, len(requests), INSERT_CHUNK):
            write(self.engine, partial(journal.enqueue, requests=requests[start:start + INSERT_CHUNK]))

    def backfill(self, requests: Sequence[ClaimRequest], actor: str, target: str, after: dict[str, Any],
                 reason: str | None) -> Backfilled:
        """Queue an operator's backfill (``journal.backfill``) and its audit line (``task.backfill``,
        ``after`` with what it did added), in one transaction: both or neither."""
        def work(conn: Any) -> Backfilled:
            done = journal.backfill(conn, requests)
            conn.execute(audit_log.insert().values(
                id=str(uuid.uuid4()), at=db_now_ms(), actor=actor, action="task.backfill", target=target, before=None,
                after={**after, "queued": len(done.new) + len(done.again), "new": len(done.new),
                       "again": len(done.again), "already": len(done.already)}, reason=reason,
                team=audit_team("task.backfill", target)))
            return done
        return write(self.engine, work)

    def journaled(self, occurrence_ids: Sequence[str]) -> dict[str, tuple[ExecutionStatus, bool]]:
        """The status of each of ``occurrence_ids`` journaled, and whether its row is a summary of
        several missed minutes (a backfill's dry run; by primary key, a thousand at most)."""
        x = executions.c
        query = select(x.occurrence_id, x.status, x.missed_until).where(x.occurrence_id.in_(list(occurrence_ids)))
        rows = read(self.engine, lambda conn: conn.execute(query).all()) if occurrence_ids else []
        return {r.occurrence_id: (ExecutionStatus(r.status), r.missed_until is not None) for r in rows}

    def queued(self, limit: int) -> list[Execution]:
        """The oldest queued rows that may be claimed now, by (created_at, occurrence_id) on the
        status index; catch-up runs journaled together come in the order of their minutes. A
        jittered cron occurrence is left out until its delayed start (``next_attempt_at``)."""
        query = (select(executions).where(executions.c.status == ExecutionStatus.QUEUED,
                                          or_(executions.c.next_attempt_at.is_(None),
                                              executions.c.next_attempt_at <= db_now_ms()))
                 .order_by(executions.c.created_at, executions.c.scheduled_minute, executions.c.occurrence_id)
                 .limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def next_delayed(self) -> int | None:
        """The earliest delayed start (DB clock) of a queued jittered occurrence still to come;
        None when none waits for its time."""
        query = select(func.min(executions.c.next_attempt_at)).where(
            executions.c.status == ExecutionStatus.QUEUED, executions.c.next_attempt_at > db_now_ms())
        found = read(self.engine, lambda conn: conn.execute(query).scalar())
        return None if found is None else int(found)

    def claim_queued(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Own queued rows and take their tasks' slots, in one transaction (``journal.claim_queued``:
        claimed, skipped, waiting, or exists when another node took it)."""
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: journal.claim_queued(conn, self.writer, ordered)) if ordered else []

    def settle_queued(self, execution: Execution, status: ExecutionStatus, reason: str) -> bool:
        """End a queued row that no node will run (``journal.settle_queued``); False when it is not
        queued any more."""
        return write(self.engine, lambda conn: journal.settle_queued(conn, execution, status, reason))

    def journal_missed(self, missed: Sequence[Missed]) -> set[str]:
        """Journal occurrences as ``missed`` (``journal.miss``), ``INSERT_CHUNK`` a transaction (a
        long outage: many short transactions); the ids inserted, each counted once."""
        inserted: set[str] = set()
        for start in range(0, len(missed), INSERT_CHUNK):
            inserted.update(write(self.engine, partial(journal.miss, missed=missed[start:start + INSERT_CHUNK])))
        return inserted
