"""Journal rows no node owns: ``queued`` occurrences waiting for a node able to run them, and
``missed`` ones that no node ran (docs/semantics.md, "Routing and misses")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions
from scheduler_core.model import Execution
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.dialect import insert_ignore_many
from scheduler_core.store.executions import ClaimRequest, ClaimResult, ExecutionRepository, execution_from_row
from scheduler_core.store.totals import Tally, lock_tasks
from scheduler_core.store.transactions import one_row, read, write

QUEUED = ExecutionStatus.QUEUED
INSERT_CHUNK = 500  # rows per insert transaction


@dataclass(frozen=True)
class Missed:
    """An occurrence no node ran; with ``until`` and ``count``, a summary of several minutes."""

    request: ClaimRequest  # its identity: occurrence id, task, revision, trigger, scheduled minute
    reason: str  # no_node_running | no_capable_node | ...
    until: int | None = None  # a summary row: the last minute it stands for
    count: int | None = None  # a summary row: how many minutes it stands for


class HandoffRepository:
    """Writes of journal rows without an owner. ``executions`` lends its slot statements."""

    def __init__(self, executions_repo: ExecutionRepository) -> None:
        self.engine = executions_repo.engine
        self._executions = executions_repo

    # --- queued -------------------------------------------------------------------------

    def enqueue(self, requests: Sequence[ClaimRequest]) -> None:
        """Journal occurrences as ``queued``: unowned, no slot, for a node able to run them (an
        occurrence id journaled already -- a repeated idempotency key, a minute another node
        caught up -- is left as it is)."""
        rows = [{**self._identity(r), "status": QUEUED, "reason": None, "missed_until": None, "missed_count": None}
                for r in requests]
        for start in range(0, len(rows), INSERT_CHUNK):
            self._insert(rows[start:start + INSERT_CHUNK])

    def queued(self, limit: int) -> list[Execution]:
        """The oldest queued rows, by (created_at, occurrence_id) on the status index; catch-up runs
        journaled together come in the order of their minutes."""
        query = (select(executions).where(executions.c.status == QUEUED)
                 .order_by(executions.c.created_at, executions.c.scheduled_minute, executions.c.occurrence_id)
                 .limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def claim_queued(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Own queued rows and take their tasks' slots, in one transaction.

        Each row still ``queued`` becomes ``running`` under this node's token and lease; one that
        is not any more (another node took it) is ``exists``. Whose slot is busy: a manual
        trigger is ``skipped`` (``slot_busy``), as its claim on the triggering node would have
        been; a catch-up run stays queued (it waits for the slot, in order).
        """
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: self._claim_queued(conn, ordered)) if ordered else []

    def _claim_queued(self, conn: Connection, requests: list[ClaimRequest]) -> list[ClaimResult]:
        won = [r for r in requests if self._own(conn, r)]
        won.sort(key=lambda r: r.scheduled_minute or 0)  # a task's slot goes to its earliest minute
        seated = self._executions.take_slots(conn, won)
        outcomes = {}
        skipped = Tally()
        for r in won:
            if r.occurrence_id in seated:
                outcomes[r.occurrence_id] = "claimed"
            elif r.trigger == Trigger.CATCHUP:
                self._requeue(conn, r.occurrence_id)
                outcomes[r.occurrence_id] = "waiting"
            else:
                conn.execute(update(executions).where(executions.c.occurrence_id == r.occurrence_id).values(
                    status=ExecutionStatus.SKIPPED, reason="slot_busy", lease_until=None, updated_at=db_now_ms()))
                outcomes[r.occurrence_id] = "skipped"
                skipped.execution(r.task_id, ExecutionStatus.SKIPPED)
        skipped.write(conn)
        return [ClaimResult(r.occurrence_id, outcomes.get(r.occurrence_id, "exists")) for r in requests]

    def _own(self, conn: Connection, r: ClaimRequest) -> bool:
        now = db_now_ms()
        return one_row(conn.execute(update(executions).where(
            executions.c.occurrence_id == r.occurrence_id, executions.c.status == QUEUED,
        ).values(status=ExecutionStatus.RUNNING, execution_token=r.token, owner_node=self._executions.node_id,
                 lease_until=now + self._executions.lease_ms, updated_at=now)))

    @staticmethod
    def _requeue(conn: Connection, occurrence_id: str) -> None:
        conn.execute(update(executions).where(executions.c.occurrence_id == occurrence_id).values(
            status=QUEUED, execution_token=None, owner_node=None, lease_until=None))

    def settle_queued(self, execution: Execution, status: ExecutionStatus, reason: str) -> bool:
        """End a queued row that no node will run (``missed`` / ``no_capable_node``, or
        ``interrupted`` / ``deleted``); False when it is not queued any more."""

        def work(conn: Connection) -> bool:
            settled = one_row(conn.execute(update(executions).where(
                executions.c.occurrence_id == execution.occurrence_id, executions.c.status == QUEUED,
            ).values(status=status, reason=reason, updated_at=db_now_ms())))
            if settled:
                tally = Tally().execution(execution.task_id, status)
                tally.missed(execution.task_id, 1 if status == ExecutionStatus.MISSED else 0).write(conn)
            return settled

        return write(self.engine, work)

    # --- missed -------------------------------------------------------------------------

    def journal_missed(self, missed: Sequence[Missed]) -> set[str]:
        """Journal occurrences as ``missed`` (terminal, no slot). An occurrence id journaled
        already is left as it is, so a late or repeated scan never journals a minute twice.
        Returns the ids this call inserted; each is counted (``store/totals.py``) in its insert's
        transaction."""
        rows = [{**self._identity(m.request), "status": ExecutionStatus.MISSED, "reason": m.reason,
                 "missed_until": m.until, "missed_count": m.count} for m in missed]
        inserted: set[str] = set()
        for start in range(0, len(rows), INSERT_CHUNK):  # a long outage: many short transactions
            inserted.update(self._insert(rows[start:start + INSERT_CHUNK], count_missed=True))
        return inserted

    # --- shared -------------------------------------------------------------------------

    @staticmethod
    def _identity(r: ClaimRequest) -> dict[str, Any]:
        return {"occurrence_id": r.occurrence_id, "task_id": r.task_id, "task_revision": r.task_revision,
                "trigger": r.trigger, "source": r.source, "idempotency_key": r.idempotency_key,
                "scheduled_minute": r.scheduled_minute, "max_attempts": r.max_attempts}

    def _insert(self, rows: list[dict[str, Any]], count_missed: bool = False) -> dict[str, None]:
        """Insert-or-ignore unowned rows; the ids inserted (MySQL, without ``count_missed``: every
        id of the same status and reason, as it cannot tell). ``count_missed``: the inserted rows
        are counted in the same transaction, exactly."""

        def work(conn: Connection) -> dict[str, None]:
            mysql = dialect_kind(conn) == "mysql"
            todo = self._unjournaled(conn, rows) if mysql and count_missed else rows
            now = db_now_ms()
            common: dict[str, Any] = {
                "sequence": 1, "attempt": 0, "execution_token": None, "owner_node": None, "lease_until": None,
                "next_attempt_at": None, "attempts": [], "log_persistence": None, "resolved_by": None,
                "resolution_reason": None, "created_at": now, "updated_at": now}
            inserted = insert_ignore_many(conn, executions, todo, common) if todo else set()
            if inserted is None or (mysql and todo):
                done = dict.fromkeys(self._inserted_mysql(conn, todo))
            else:
                done = dict.fromkeys(str(i) for i in inserted)
            if count_missed:
                tally = Tally()
                for r in (r for r in todo if r["occurrence_id"] in done):
                    tally.execution(r["task_id"], r["status"]).missed(r["task_id"], r["missed_count"] or 1)
                tally.write(conn)
            return done

        return write(self.engine, work)

    @staticmethod
    def _unjournaled(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """MySQL, before journaling missed rows: the rows not journaled yet, read after this
        transaction has locked the tasks' totals (``lock_tasks``). Two nodes journaling the same
        minutes queue there, so the second one reads the first one's rows here and leaves them
        out: what its insert then adds is its own (``_inserted_mysql`` drops the rows a claim
        journaled meanwhile), and each minute is counted once."""
        lock_tasks(conn, {r["task_id"] for r in rows})
        ids = [r["occurrence_id"] for r in rows]
        found = set(conn.execute(select(executions.c.occurrence_id).where(executions.c.occurrence_id.in_(ids)))
                    .scalars())
        return [r for r in rows if r["occurrence_id"] not in found]

    @staticmethod
    def _inserted_mysql(conn: Connection, rows: list[dict[str, Any]]) -> list[str]:
        """MySQL cannot say which rows an insert-or-ignore inserted: those whose status and
        reason are what was written (an older row of another kind differs)."""
        ids = [r["occurrence_id"] for r in rows]
        found = {row[0]: (row[1], row[2]) for row in conn.execute(
            select(executions.c.occurrence_id, executions.c.status, executions.c.reason)
            .where(executions.c.occurrence_id.in_(ids)))}
        return [r["occurrence_id"] for r in rows if found.get(r["occurrence_id"]) == (r["status"], r["reason"])]
