"""The journal (``executions``) and the task slots: claim, begin, renew, finish, expire.

Every ownership decision compares ``lease_until`` with ``db_now_ms()`` inside the statement
that acts on it, so it is the database clock at the moment the row is written that decides,
also after a wait on a row lock: an owner's write locks its rows first (``_lock_rows``) so
the lease comparison runs after any wait. Every conditional write checks its row count:
0 rows means the caller lost, and it must not act as if it had won.

Token: each ownership of an execution has a fresh random ``execution_token``; the slot row
holds the token of the execution occupying it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, select, update
from sqlalchemy.engine import Connection, Engine, Row

from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, slots
from scheduler_core.model import Attempt, Execution
from scheduler_core.store.dialect import greatest, insert_ignore, read, write


@dataclass(frozen=True)
class ClaimRequest:
    """An occurrence a node wants to own."""

    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: str  # cron | manual
    max_attempts: int
    token: str  # fresh random token for this ownership
    source: str | None = None
    idempotency_key: str | None = None
    scheduled_minute: int | None = None


@dataclass(frozen=True)
class ClaimResult:
    occurrence_id: str
    outcome: str  # claimed | skipped (journaled, slot busy) | exists (journaled before, not by us)


def execution_from_row(row: Row[Any]) -> Execution:
    data = row._mapping
    attempts_raw = data["attempts"]
    if isinstance(attempts_raw, str):  # defensive: some drivers hand JSON back as text
        attempts_raw = json.loads(attempts_raw)
    return Execution(
        occurrence_id=data["occurrence_id"], task_id=data["task_id"],
        task_revision=to_ms(data["task_revision"], "task_revision"), trigger=data["trigger"],
        source=data["source"], idempotency_key=data["idempotency_key"],
        scheduled_minute=optional_ms(data["scheduled_minute"], "scheduled_minute"), status=data["status"],
        reason=data["reason"], sequence=int(data["sequence"]), attempt=int(data["attempt"]),
        max_attempts=int(data["max_attempts"]), execution_token=data["execution_token"],
        owner_node=data["owner_node"], lease_until=optional_ms(data["lease_until"], "lease_until"),
        attempts=tuple(Attempt.from_json(a) for a in attempts_raw or ()),
        log_persistence=data["log_persistence"], resolved_by=data["resolved_by"],
        resolution_reason=data["resolution_reason"], created_at=to_ms(data["created_at"], "created_at"),
        updated_at=to_ms(data["updated_at"], "updated_at"))


def _json_attempts(attempts: Iterable[Attempt]) -> list[dict[str, Any]]:
    return [a.to_json() for a in attempts]


class ExecutionRepository:
    """Journal and slot statements. ``lease_ms`` is this node's lease length."""

    def __init__(self, engine: Engine, node_id: str, lease_ms: int) -> None:
        self.engine = engine
        self.node_id = node_id
        self.lease_ms = lease_ms

    def _touch(self, conn: Connection) -> Any:
        """updated_at that never goes back, even if the DB clock steps back."""
        return greatest(conn, db_now_ms(), executions.c.updated_at + 1)

    @staticmethod
    def _lock_rows(conn: Connection, condition: Any) -> None:
        """Take the row locks before an owner's lease-checked write.

        PostgreSQL evaluates an UPDATE's WHERE while scanning, before it waits on a row lock,
        and re-evaluates it after the wait only if the blocking transaction changed the row:
        a plain ``SELECT ... FOR UPDATE`` elsewhere would let a deadline that passed during the
        wait go unnoticed. Locking first makes the following UPDATE read the clock after every
        wait. (SQLite needs no row lock: BEGIN IMMEDIATE already serialises writers.)
        """
        if dialect_kind(conn) != "sqlite":
            conn.execute(select(executions.c.occurrence_id).where(condition).with_for_update())

    def _owned(self, occurrence_id: str, token: str) -> Any:
        """Still ours: our token, still running, lease not yet expired (DB clock, now)."""
        return and_(executions.c.occurrence_id == occurrence_id, executions.c.execution_token == token,
                    executions.c.status == "running", executions.c.lease_until > db_now_ms())

    # --- claim --------------------------------------------------------------------

    def claim(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Journal each occurrence and take its task's slot, all in one transaction.

        - An occurrence id that is already journaled (by anyone) is left alone: ``exists``.
        - New rows start ``running`` with our token and ``lease_until = db_now + lease``.
        - A new row whose task slot is held becomes ``skipped`` (reason ``slot_busy``).
        Requests are processed in occurrence-id order so concurrent claimers lock alike.
        """
        if not requests:
            return []
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: self._claim(conn, ordered))

    def _claim(self, conn: Connection, requests: list[ClaimRequest]) -> list[ClaimResult]:
        conn.execute(insert_ignore(conn, executions, [self._new_row(r) for r in requests]))
        ids = [r.occurrence_id for r in requests]
        query = select(executions.c.occurrence_id, executions.c.execution_token).where(
            executions.c.occurrence_id.in_(ids))
        tokens: dict[str, str | None] = {row[0]: row[1] for row in conn.execute(query)}
        won = [r for r in requests if tokens.get(r.occurrence_id) == r.token]
        holders = self._take_slots(conn, won)
        skipped = [r.occurrence_id for r in won if holders.get(r.task_id) != r.occurrence_id]
        if skipped:
            conn.execute(update(executions).where(executions.c.occurrence_id.in_(skipped))
                         .values(status="skipped", reason="slot_busy", lease_until=None, updated_at=db_now_ms()))
        won_ids = {r.occurrence_id for r in won}
        return [ClaimResult(r.occurrence_id, ("skipped" if r.occurrence_id in skipped else "claimed")
                            if r.occurrence_id in won_ids else "exists") for r in requests]

    def _new_row(self, r: ClaimRequest) -> dict[str, Any]:
        now = db_now_ms()
        return {
            "occurrence_id": r.occurrence_id, "task_id": r.task_id, "task_revision": r.task_revision,
            "trigger": r.trigger, "source": r.source, "idempotency_key": r.idempotency_key,
            "scheduled_minute": r.scheduled_minute, "status": "running", "reason": None, "sequence": 1,
            "attempt": 0, "max_attempts": r.max_attempts, "execution_token": r.token, "owner_node": self.node_id,
            "lease_until": now + self.lease_ms, "next_attempt_at": None, "attempts": [],
            "log_persistence": None, "resolved_by": None, "resolution_reason": None,
            "created_at": now, "updated_at": now,
        }

    def _take_slots(self, conn: Connection, won: list[ClaimRequest]) -> dict[str, str | None]:
        """Take free slots for the first won occurrence of each task; return slot holders."""
        first: dict[str, ClaimRequest] = {}
        for r in won:
            first.setdefault(r.task_id, r)
        if not first:
            return {}
        task_ids = sorted(first)
        conn.execute(insert_ignore(conn, slots, [{"task_id": t, "occurrence_id": None, "execution_token": None,
                                                  "updated_at": db_now_ms()} for t in task_ids]))
        conn.execute(
            update(slots)
            .where(slots.c.task_id.in_(task_ids), slots.c.occurrence_id.is_(None))
            .values(occurrence_id=case({t: r.occurrence_id for t, r in first.items()}, value=slots.c.task_id),
                    execution_token=case({t: r.token for t, r in first.items()}, value=slots.c.task_id),
                    updated_at=db_now_ms()))
        return dict(conn.execute(select(slots.c.task_id, slots.c.occurrence_id)
                                 .where(slots.c.task_id.in_(task_ids))).all())

    # --- owner's statements -----------------------------------------------------------

    def begin_attempt(self, occurrence_id: str, token: str, attempts: Sequence[Attempt]) -> bool:
        """Record that attempt ``len(attempts)`` starts now, and extend the lease.

        Changes attempt, attempts, lease_until, updated_at. False: the lease is lost, and the
        handler must not run.
        """

        def work(conn: Connection) -> bool:
            self._lock_rows(conn, executions.c.occurrence_id == occurrence_id)
            return conn.execute(
                update(executions).where(self._owned(occurrence_id, token))
                .values(attempt=len(attempts), attempts=_json_attempts(attempts),
                        lease_until=db_now_ms() + self.lease_ms, updated_at=self._touch(conn))
            ).rowcount == 1

        return write(self.engine, work)

    def renew(self, tokens: Sequence[str]) -> set[str]:
        """Extend the leases of our running executions; returns the tokens that are LOST.

        Only rows with our token, still running and not yet expired are extended. No
        lock-first here (unlike finish): a renewal that waited on a lock and lands after its
        deadline harms nobody, because any takeover or settlement in between changed the row
        (token or status), which makes PostgreSQL re-check this WHERE and skip the row; and
        locking every owned row at once would queue all of this node's runners behind it.
        """
        if not tokens:
            return set()

        def work(conn: Connection) -> set[str]:
            renewed = conn.execute(
                update(executions)
                .where(executions.c.execution_token.in_(tokens), executions.c.status == "running",
                       executions.c.lease_until > db_now_ms())
                .values(lease_until=db_now_ms() + self.lease_ms)
            ).rowcount
            if renewed == len(tokens):
                return set()
            alive = set(conn.execute(select(executions.c.execution_token).where(
                executions.c.execution_token.in_(tokens), executions.c.status == "running",
                executions.c.lease_until > db_now_ms())).scalars())
            return set(tokens) - alive

        return write(self.engine, work)

    def finish(self, execution: Execution, token: str, status: str, reason: str | None,
               attempts: Sequence[Attempt], release_slot: bool) -> bool:
        """The terminal commit: outcome + attempts (logs ``pending``) and the slot release.

        Applies only while we own the execution (token, running, lease unexpired). The slot is
        released only when ``release_slot`` (an unknown outcome keeps it). False: we lost the
        execution and nothing changed.
        """

        def work(conn: Connection) -> bool:
            self._lock_rows(conn, executions.c.occurrence_id == execution.occurrence_id)
            changed = conn.execute(
                update(executions).where(self._owned(execution.occurrence_id, token))
                .values(status=status, reason=reason, attempts=_json_attempts(attempts),
                        attempt=len(attempts), lease_until=None, next_attempt_at=None,
                        log_persistence="pending" if attempts else None, updated_at=self._touch(conn))
            ).rowcount
            if changed != 1:
                return False
            if release_slot:
                self._release_slot(conn, execution.task_id, execution.occurrence_id)
            return True

        return write(self.engine, work)

    def expire_now(self, occurrence_id: str, token: str) -> bool:
        """Give up ownership so another node may take over at once (close of an idempotent run)."""

        def work(conn: Connection) -> bool:
            self._lock_rows(conn, executions.c.occurrence_id == occurrence_id)
            return conn.execute(update(executions).where(self._owned(occurrence_id, token))
                                .values(lease_until=db_now_ms() - 1, updated_at=self._touch(conn))).rowcount == 1

        return write(self.engine, work)

    @staticmethod
    def _release_slot(conn: Connection, task_id: str, occurrence_id: str) -> None:
        conn.execute(update(slots).where(slots.c.task_id == task_id, slots.c.occurrence_id == occurrence_id)
                     .values(occurrence_id=None, execution_token=None, updated_at=db_now_ms()))

    # --- recovery of expired leases ---------------------------------------------------

    def expired(self, limit: int = 100) -> list[Execution]:
        """Running executions whose lease has expired (DB clock), oldest first."""
        query = (select(executions).where(executions.c.status == "running", executions.c.lease_until < db_now_ms())
                 .order_by(executions.c.lease_until).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def _expired_by(self, execution: Execution) -> Any:
        """Still the expired row we read: same token, running, lease still expired."""
        return and_(executions.c.occurrence_id == execution.occurrence_id,
                    executions.c.execution_token == execution.execution_token,
                    executions.c.status == "running", executions.c.lease_until < db_now_ms())

    def take_over(self, execution: Execution, new_token: str) -> bool:
        """Become the owner of an expired execution: new token, sequence + 1, fresh lease.

        The slot keeps pointing at the occurrence and takes the new token. False: someone
        else acted first (or the owner renewed in time).
        """

        def work(conn: Connection) -> bool:
            changed = conn.execute(
                update(executions).where(self._expired_by(execution))
                .values(execution_token=new_token, owner_node=self.node_id, sequence=executions.c.sequence + 1,
                        lease_until=db_now_ms() + self.lease_ms, updated_at=self._touch(conn))
            ).rowcount
            if changed == 1:
                conn.execute(update(slots).where(slots.c.task_id == execution.task_id,
                                                 slots.c.occurrence_id == execution.occurrence_id)
                             .values(execution_token=new_token, updated_at=db_now_ms()))
            return changed == 1

        return write(self.engine, work)

    def settle_expired(self, execution: Execution, status: str, reason: str, attempts: Sequence[Attempt],
                       release_slot: bool) -> bool:
        """Close an expired execution without running it: ``unknown`` (slot kept) when its
        handler may have run, ``interrupted`` (slot released) when no attempt ever began."""

        def work(conn: Connection) -> bool:
            changed = conn.execute(
                update(executions).where(self._expired_by(execution))
                .values(status=status, reason=reason, attempts=_json_attempts(attempts), lease_until=None,
                        log_persistence="pending" if attempts else None, updated_at=self._touch(conn))
            ).rowcount
            if changed == 1 and release_slot:
                self._release_slot(conn, execution.task_id, execution.occurrence_id)
            return changed == 1

        return write(self.engine, work)

    # --- operator API -------------------------------------------------------------------

    def get(self, occurrence_id: str) -> Execution | None:
        query = select(executions).where(executions.c.occurrence_id == occurrence_id)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return execution_from_row(row) if row is not None else None

    def list_by_status(self, status: str, limit: int, offset: int) -> list[Execution]:
        query = (select(executions).where(executions.c.status == status)
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit).offset(offset))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def recent(self, status: str | None, task_id: str | None, limit: int, offset: int) -> list[Execution]:
        """Newest first, optionally one status and/or one task (served by the status / task indexes)."""
        query = select(executions)
        if status is not None:
            query = query.where(executions.c.status == status)
        if task_id is not None:
            query = query.where(executions.c.task_id == task_id)
        query = query.order_by(executions.c.created_at.desc(), executions.c.occurrence_id).limit(limit).offset(offset)
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def running(self, limit: int = 500) -> list[Execution]:
        """Executions currently owned under a lease (for the nodes page), oldest first."""
        query = (select(executions).where(executions.c.status == "running")
                 .order_by(executions.c.created_at, executions.c.occurrence_id).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def list_log_failures(self, limit: int, offset: int) -> list[Execution]:
        query = (select(executions).where(executions.c.log_persistence == "pending")
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit).offset(offset))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def resolve_unknown(self, execution: Execution, status: str, expected_updated_at: int,
                        resolved_by: str | None, reason: str | None) -> bool:
        """Compare-and-set an unknown execution to success/discarded and free its slot.

        Applies only if the row is still ``unknown`` with ``updated_at == expected_updated_at``.
        """

        def work(conn: Connection) -> bool:
            changed = conn.execute(
                update(executions)
                .where(executions.c.occurrence_id == execution.occurrence_id, executions.c.status == "unknown",
                       executions.c.updated_at == expected_updated_at)
                .values(status=status, resolved_by=resolved_by, resolution_reason=reason,
                        updated_at=self._touch(conn))
            ).rowcount
            if changed == 1:
                self._release_slot(conn, execution.task_id, execution.occurrence_id)
            return changed == 1

        return write(self.engine, work)

    def slot_holder(self, task_id: str) -> tuple[str | None, str | None]:
        query = select(slots.c.occurrence_id, slots.c.execution_token).where(slots.c.task_id == task_id)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return (row[0], row[1]) if row is not None else (None, None)

    def count_by_status(self) -> dict[str, int]:
        query = select(executions.c.status, func.count()).group_by(executions.c.status)
        return {status: int(n) for status, n in read(self.engine, lambda conn: conn.execute(query).all())}
