"""The journal (``executions``) and the task slots: claim, begin, renew, finish, expire.

Every ownership decision compares ``lease_until`` with ``db_now_ms()`` in the statement that
acts, after the row locks; batches and their per-database answers: docs/architecture.md (5)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy import and_, func, literal, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Update

from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import executions, slots
from scheduler_core.model import Attempt, Execution
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.dialect import Batch, StatementCache, greatest, insert_ignore_many, run
from scheduler_core.store.logs import project_logs
from scheduler_core.store.totals import Tally
from scheduler_core.store.transactions import is_retryable, one_row, read, write

# MySQL: pauses before a free slot that another transaction has locked is tried again (ExecutionRepository._lock_slots)
SLOT_RETRY_PAUSES_S = (0.005, 0.02, 0.05)


@dataclass(frozen=True)
class ClaimRequest:
    """An occurrence a node wants to own."""

    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: str  # cron | manual
    max_attempts: int
    token: str  # this claimer's token for this occurrence (never shared with another claimer)
    source: str | None = None
    idempotency_key: str | None = None
    scheduled_minute: int | None = None
    # The same request again after a claim call failed (its COMMIT may have been applied):
    # a row journaled with this token is then this claimer's own (see ``claim``).
    retry: bool = False


@dataclass(frozen=True)
class ClaimResult:
    occurrence_id: str
    outcome: str  # claimed | skipped (journaled, slot busy) | exists (journaled before, not by us)


@dataclass(frozen=True)
class BeginRequest:
    """The owner starts attempt ``len(attempts)`` (the last one) of an execution now."""

    occurrence_id: str
    token: str
    attempts: Sequence[Attempt]
    execution: Execution | None = None  # given: a cron occurrence's first attempt counts its fire lateness

    def lateness(self) -> tuple[str, int] | None:
        """The fire lateness this begin makes known, with its task: the first attempt of the first
        owner of a cron occurrence, its start minus the scheduled minute (None otherwise)."""
        e, last = self.execution, self.attempts[-1] if self.attempts else None
        if e is None or last is None or e.trigger != Trigger.CRON or e.scheduled_minute is None:
            return None
        return (e.task_id, last.started_at - e.scheduled_minute) if (last.attempt, last.sequence) == (1, 1) else None


@dataclass(frozen=True)
class FinishRequest:
    """The owner's terminal commit of one execution."""

    execution: Execution
    token: str
    status: str
    reason: str | None
    attempts: Sequence[Attempt]
    release_slot: bool  # False for an unknown outcome: the slot stays held

    @property
    def occurrence_id(self) -> str:
        return self.execution.occurrence_id


@dataclass(frozen=True)
class FinishResult:
    committed: frozenset[str]  # occurrence ids whose terminal commit applied (the rest were lost)
    persisted: frozenset[str]  # of those, the ones whose logs were projected in the same transaction
    projection_error: str | None = None  # why the projection was left out (those rows stay pending)


class ProjectionFailedError(Exception):
    """The log projection inside a terminal commit failed; the transaction is rolled back and
    the terminal commit is made again without it."""


def execution_from_row(row: Row[Any]) -> Execution:
    data = row._mapping
    attempts_raw = data["attempts"]
    if isinstance(attempts_raw, str):  # defensive: some drivers hand JSON back as text
        attempts_raw = json.loads(attempts_raw)
    return Execution(
        occurrence_id=data["occurrence_id"], task_id=data["task_id"],
        task_revision=to_ms(data["task_revision"], "task_revision"), trigger=Trigger(data["trigger"]),
        source=data["source"], idempotency_key=data["idempotency_key"],
        scheduled_minute=optional_ms(data["scheduled_minute"], "scheduled_minute"),
        status=ExecutionStatus(data["status"]),
        reason=data["reason"], sequence=int(data["sequence"]), attempt=int(data["attempt"]),
        max_attempts=int(data["max_attempts"]), execution_token=data["execution_token"],
        owner_node=data["owner_node"], lease_until=optional_ms(data["lease_until"], "lease_until"),
        attempts=tuple(Attempt.from_json(a) for a in attempts_raw or ()),
        log_persistence=data["log_persistence"], resolved_by=data["resolved_by"],
        resolution_reason=data["resolution_reason"], created_at=to_ms(data["created_at"], "created_at"),
        updated_at=to_ms(data["updated_at"], "updated_at"))


def _json_attempts(attempts: Iterable[Attempt]) -> list[dict[str, Any]]:
    return [a.to_json() for a in attempts]


T = TypeVar("T")
_c = executions.c
_BEGIN_COLUMNS = {"execution_token": _c.execution_token, "attempt": _c.attempt, "attempts": _c.attempts}
_FINISH_COLUMNS = {**_BEGIN_COLUMNS, "status": _c.status, "reason": _c.reason, "log_persistence": _c.log_persistence}


class ExecutionRepository:
    """Journal and slot statements. ``lease_ms`` is this node's lease length."""

    def __init__(self, engine: Engine, node_id: str, lease_ms: int) -> None:
        self.engine = engine
        self.node_id = node_id
        self.lease_ms = lease_ms
        self._statements = StatementCache()

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

    def _statement(self, batch: Batch, name: str, build: Callable[[], Any]) -> Any:
        """``build()``, or the cached statement when the batch's SQL does not depend on it
        (run either with ``dialect.run``)."""
        return self._statements.driver(name, build) if batch.cacheable else build()

    def _lock_batch(self, conn: Connection, ids: list[str]) -> dict[str, Any]:
        """``_lock_rows`` for a batch, in occurrence-id order (concurrent lockers queue alike).

        Returns each locked row's ``updated_at``: while we hold the locks only our own write
        can change it, which is how MySQL learns per row what its UPDATE changed.
        """
        if dialect_kind(conn) == "sqlite":
            return {}
        batch = Batch(conn).listed("ids", ids)
        query = self._statement(batch, "lock", lambda: (
            select(executions.c.occurrence_id, executions.c.updated_at)
            .where(batch.one_of(executions.c.occurrence_id, "ids"))
            .order_by(executions.c.occurrence_id).with_for_update()))
        return {row[0]: row[1] for row in run(conn, query, batch.params).all()}

    @staticmethod
    def _ownership() -> dict[str, ColumnElement[Any]]:
        """What ``_owned_batch`` compares every row with: running, and the DB clock now."""
        return {"running": literal("running", executions.c.status.type), "now": db_now_ms()}

    @staticmethod
    def _owned_batch(batch: Batch) -> Any:
        """Still ours, for every row of a batch (token, running, lease unexpired at the DB clock).

        PostgreSQL matches each row's own token; elsewhere ``token IN tokens`` does the same
        (tokens are random per ownership: a token belongs to one occurrence only). Status and
        lease are compared with the batch's shared values (see ``Batch.shared``).
        """
        token = (executions.c.execution_token == batch.value("execution_token") if batch.cacheable
                 else batch.one_of(executions.c.execution_token, "tokens"))
        return and_(batch.matches(), token, executions.c.status == batch.shared("running"),
                    executions.c.lease_until > batch.shared("now"))

    @staticmethod
    def _changed(conn: Connection, statement: Update, batch: Batch, ids: list[str],
                 before: dict[str, Any]) -> set[str]:
        """Run an owner's lease-checked UPDATE (with RETURNING, except on MySQL) over locked
        rows; the ids it changed."""
        if dialect_kind(conn) != "mysql":
            return set(run(conn, statement, batch.params).scalars().all())
        matched = conn.execute(statement, batch.params).rowcount  # MySQL: rows matched by the WHERE
        if matched == len(ids):
            return set(ids)
        if matched == 0:
            return set()
        after = {row[0]: row[1] for row in conn.execute(
            select(executions.c.occurrence_id, executions.c.updated_at).where(executions.c.occurrence_id.in_(ids)))}
        return {i for i in ids if i in after and after[i] != before.get(i)}

    @staticmethod
    def _returning(conn: Connection, statement: Update) -> Update:
        return statement if dialect_kind(conn) == "mysql" else statement.returning(executions.c.occurrence_id)

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
        - A ``retry`` request whose row is journaled with its own token is an earlier claim of
          ours whose answer was lost (a dropped connection after COMMIT): ``claimed`` again
          while no attempt began (see ``_earlier_outcome``). The caller retries a failed claim
          with the same token, which no other claimer can hold.
        Requests are processed in occurrence-id order so concurrent claimers lock alike.
        """
        if not requests:
            return []
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: self._claim(conn, ordered))

    def _claim(self, conn: Connection, requests: list[ClaimRequest]) -> list[ClaimResult]:
        earlier = self._journaled(conn, requests) if dialect_kind(conn) != "sqlite" else {}
        fresh = [r for r in requests if r.occurrence_id not in earlier]
        won: list[ClaimRequest] = []
        if fresh:
            inserted = insert_ignore_many(conn, executions, [self._new_row(r) for r in fresh],
                                          self._new_row_common(), self._statements, "claim")
            if inserted is not None:  # the rows this statement inserted are the ones we won
                won = [r for r in fresh if r.occurrence_id in inserted]
                others = [r for r in fresh if r.occurrence_id not in inserted]
                if others:  # SQLite (no read first): journaled before, perhaps by our own claim
                    earlier.update(self._journaled(conn, others))
            else:  # MySQL: the rows read first were committed; these were inserted just now
                tokens = {oid: token for oid, (token, _, _) in self._journaled(conn, fresh).items()}
                won = [r for r in fresh if tokens.get(r.occurrence_id) == r.token]
        seated = self.take_slots(conn, won)
        skipped = [r.occurrence_id for r in won if r.occurrence_id not in seated]
        if skipped:
            conn.execute(update(executions).where(executions.c.occurrence_id.in_(skipped))
                         .values(status="skipped", reason="slot_busy", lease_until=None, updated_at=db_now_ms()))
            Tally().executions((r.task_id, "skipped") for r in won if r.occurrence_id not in seated).write(conn)
        outcomes = {r.occurrence_id: "claimed" for r in won}
        outcomes.update({occurrence_id: "skipped" for occurrence_id in skipped})
        for r in requests:
            if r.occurrence_id in earlier:
                outcomes[r.occurrence_id] = self._earlier_outcome(r, *earlier[r.occurrence_id])
        return [ClaimResult(r.occurrence_id, outcomes.get(r.occurrence_id, "exists")) for r in requests]

    @staticmethod
    def _earlier_outcome(r: ClaimRequest, token: str | None, status: str, attempt: int) -> str:
        """An occurrence journaled before this claim: ``exists``, unless this is a retry and
        the row is the request's own earlier claim (same token) whose COMMIT was applied but
        whose answer was lost -- then it is ours: ``claimed`` while still untouched (running,
        no attempt begun: nobody runs it, no runner of ours was made for it), else what it
        became (``skipped``)."""
        if not r.retry or token != r.token:
            return "exists"
        if status == "running" and attempt == 0:
            return "claimed"
        return "skipped" if status == "skipped" else "exists"

    def _journaled(self, conn: Connection, requests: list[ClaimRequest]) -> dict[str, tuple[str | None, str, int]]:
        """The requests' occurrences already journaled: token, status and attempt of each (a
        non-locking read).

        Read before inserting (PostgreSQL, MySQL): an insert-or-ignore that meets an existing
        key waits for whoever holds that row -- InnoDB's duplicate-key check waits for any lock
        on it, PostgreSQL's ON CONFLICT for any uncommitted change to it. An owner frozen
        mid-write (GC pause, SIGSTOP, VM freeze) inside its terminal commit would stall this
        claim -- and with it the whole tick -- for as long as it stays frozen. Rows already
        committed are left out, so the INSERT only meets rows being claimed right now.
        (SQLite serialises writers: there it is read only for the rows an insert skipped.)
        """
        batch = Batch(conn).listed("ids", [r.occurrence_id for r in requests])
        query = self._statement(batch, "journaled", lambda: select(
            executions.c.occurrence_id, executions.c.execution_token, executions.c.status, executions.c.attempt,
        ).where(batch.one_of(executions.c.occurrence_id, "ids")))
        return {row[0]: (row[1], row[2], row[3]) for row in run(conn, query, batch.params).all()}

    @staticmethod
    def _new_row(r: ClaimRequest) -> dict[str, Any]:
        """The columns of a new journal row that differ per occurrence."""
        return {
            "occurrence_id": r.occurrence_id, "task_id": r.task_id, "task_revision": r.task_revision,
            "trigger": r.trigger, "source": r.source, "idempotency_key": r.idempotency_key,
            "scheduled_minute": r.scheduled_minute, "max_attempts": r.max_attempts, "execution_token": r.token,
        }

    def _new_row_common(self) -> dict[str, Any]:
        """The columns every new journal row of a claim gets: running under our lease (DB clock)."""
        now = db_now_ms()
        return {
            "status": "running", "reason": None, "sequence": 1, "attempt": 0, "owner_node": self.node_id,
            "lease_until": now + self.lease_ms, "next_attempt_at": None, "attempts": [],
            "log_persistence": None, "resolved_by": None, "resolution_reason": None,
            "created_at": now, "updated_at": now,
        }

    def take_slots(self, conn: Connection, won: list[ClaimRequest]) -> set[str]:
        """Take the free slots for the first won occurrence of each task; returns the
        occurrence ids now seated in their task's slot.

        A claim never waits for whoever holds a slot row -- an owner frozen inside its terminal
        commit (GC pause, VM freeze), its slot release written but not committed, would stall
        this claim, and with it the tick and every other task. The slot's last committed state
        decides: PostgreSQL's UPDATE matches on its snapshot, where such a slot is still held;
        InnoDB locks every row its UPDATE looks up by key (no semi-consistent read for unique
        lookups), so on MySQL the free slots are locked first with SKIP LOCKED, a locked one
        counting as busy. Existing slot rows are never met by an insert-or-ignore, which would
        wait for them as well.
        """
        first: dict[str, ClaimRequest] = {}
        for r in won:
            first.setdefault(r.task_id, r)
        if not first:
            return set()
        task_ids = sorted(first)
        if dialect_kind(conn) == "mysql":
            rows = self._lock_slots(conn, task_ids)
            free = [t for t in task_ids if t in rows and rows[t] is None]
            if free:  # locked by us: the UPDATE takes every one of them
                run(conn, *self._take_free_slots(conn, {t: first[t] for t in free}))
            seated, unseen = set(free), [t for t in task_ids if t not in rows]  # unseen: locked, or no row
        else:
            seated = set(run(conn, *self._take_free_slots(conn, {t: first[t] for t in task_ids})).scalars().all())
            unseen = [t for t in task_ids if t not in seated]  # busy, or no row
        if unseen:  # (rarely) no slot row at all: a plain read tells them apart
            present = set(conn.execute(select(slots.c.task_id).where(slots.c.task_id.in_(unseen))).scalars().all())
            missing = [first[t] for t in unseen if t not in present]
            if missing:
                seated |= self._seat_in_new_slots(conn, missing)
        return {first[t].occurrence_id for t in seated}

    @staticmethod
    def _lock_slots(conn: Connection, task_ids: list[str]) -> dict[str, str | None]:
        """MySQL: lock the slot rows of ``task_ids`` that no one else has locked (SKIP LOCKED);
        their holders, by task.

        A row locked by another transaction is not always held: InnoDB also locks, for the
        length of a statement, rows that a locking statement only passes over (an UPDATE of
        the slots planned as a scan, say). A row locked now whose last committed state is
        free is therefore tried again,
        after ``SLOT_RETRY_PAUSES_S`` (at most about 75 ms in all), before it counts as busy;
        a row whose committed state is held counts as busy at once, so a claim still never
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

    def _take_free_slots(self, conn: Connection, claims: dict[str, ClaimRequest]) -> tuple[Any, dict[str, Any]]:
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

        return self._statement(batch, "take_slots", take), batch.params

    def _seat_in_new_slots(self, conn: Connection, claims: list[ClaimRequest]) -> set[str]:
        """A task's slot row is made with the task; this covers one missing for any reason
        (the row is created already held by the claim). Returns the task ids seated."""
        rows = [{"task_id": r.task_id, "occurrence_id": r.occurrence_id, "execution_token": r.token} for r in claims]
        inserted = insert_ignore_many(conn, slots, rows, {"updated_at": db_now_ms()}, self._statements, "new_slots")
        if inserted is not None:
            return {str(t) for t in inserted}
        holders = dict(conn.execute(select(slots.c.task_id, slots.c.occurrence_id)
                                    .where(slots.c.task_id.in_([r.task_id for r in claims]))).all())
        return {r.task_id for r in claims if holders.get(r.task_id) == r.occurrence_id}

    # --- owner's statements -----------------------------------------------------------

    def begin_attempt(self, occurrence_id: str, token: str, attempts: Sequence[Attempt]) -> bool:
        """Record that attempt ``len(attempts)`` starts now, and extend the lease.

        Changes attempt, attempts, lease_until, updated_at. False: the lease is lost, and the
        handler must not run.
        """
        return occurrence_id in self.begin_attempts([BeginRequest(occurrence_id, token, tuple(attempts))])

    def begin_attempts(self, requests: Sequence[BeginRequest], conn: Connection | None = None) -> set[str]:
        """``begin_attempt`` for many executions in one transaction; returns the ids that began.

        Each row is decided on its own: one whose lease is lost (expired, taken over, settled)
        is left unchanged and missing from the answer, and its handler must not run. ``conn``:
        a connection the caller keeps (else one from the pool).
        """
        if not requests:
            return set()
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(conn or self.engine, lambda c: self._begin(c, ordered))

    def _begin(self, conn: Connection, requests: list[BeginRequest]) -> set[str]:
        ids = [r.occurrence_id for r in requests]
        before = self._lock_batch(conn, ids)
        batch = Batch(conn).listed("tokens", [r.token for r in requests]).rows(
            executions.c.occurrence_id, {r.occurrence_id: {
                "execution_token": r.token, "attempt": len(r.attempts), "attempts": _json_attempts(r.attempts),
            } for r in requests}, _BEGIN_COLUMNS, self._ownership())
        statement = self._statement(batch, "begin", lambda: self._returning(conn, update(executions).where(
            self._owned_batch(batch)).values(
            attempt=batch.value("attempt"), attempts=batch.value("attempts"),
            lease_until=db_now_ms() + self.lease_ms, updated_at=self._touch(conn))))
        begun = self._changed(conn, statement, batch, ids, before)
        tally = Tally()
        for late in (r.lateness() for r in requests if r.occurrence_id in begun):
            if late is not None:
                tally.lateness(*late)
        tally.write(conn)
        return begun

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
        execution and nothing changed. The logs are not projected here (see ``finish_many``).
        """
        request = FinishRequest(execution, token, status, reason, tuple(attempts), release_slot)
        return execution.occurrence_id in self.finish_many([request], project=False).committed

    def finish_many(self, requests: Sequence[FinishRequest], project: bool = True,
                    conn: Connection | None = None) -> FinishResult:
        """Terminal commits of many executions in one transaction, with their log projection.

        Per row as in ``finish``: a row we no longer own is left unchanged and missing from
        ``committed``. With ``project`` the committed rows' logs are inserted and the journal
        marked ``persisted`` in the same transaction. If that projection fails, the whole
        transaction is rolled back and the terminal commits are made again without it: the
        journal then says ``pending`` (the truth is in the journal either way) and
        ``projection_error`` says why.
        """
        if not requests:
            return FinishResult(frozenset(), frozenset())
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        bind = conn or self.engine
        if project:
            try:
                return write(bind, lambda c: self._finish(c, ordered, True))
            except ProjectionFailedError as exc:
                error = str(exc)
        else:
            error = None
        result = write(bind, lambda c: self._finish(c, ordered, False))
        return replace(result, projection_error=error)

    def _finish(self, conn: Connection, requests: list[FinishRequest], project: bool) -> FinishResult:
        """With ``project`` the rows with attempts are written ``persisted`` at once: their logs
        are inserted below in this transaction, and a projection that fails rolls it all back
        (``finish_many`` then writes them ``pending``)."""
        ids = [r.occurrence_id for r in requests]
        logged = "persisted" if project else "pending"
        before = self._lock_batch(conn, ids)
        batch = Batch(conn).listed("tokens", [r.token for r in requests]).rows(
            executions.c.occurrence_id, {r.occurrence_id: {
                "execution_token": r.token, "status": r.status, "reason": r.reason, "attempt": len(r.attempts),
                "attempts": _json_attempts(r.attempts), "log_persistence": logged if r.attempts else None,
            } for r in requests}, _FINISH_COLUMNS, self._ownership())
        statement = self._statement(batch, "finish", lambda: self._returning(conn, update(executions).where(
            self._owned_batch(batch)).values(
            status=batch.value("status"), reason=batch.value("reason"), attempts=batch.value("attempts"),
            attempt=batch.value("attempt"), log_persistence=batch.value("log_persistence"),
            lease_until=None, next_attempt_at=None, updated_at=self._touch(conn))))
        won = self._changed(conn, statement, batch, ids, before)
        Tally().executions((r.execution.task_id, r.status) for r in requests if r.occurrence_id in won).write(conn)
        released = [r for r in requests if r.occurrence_id in won and r.release_slot]
        if released:  # an occurrence belongs to one task: (task, occurrence) pairs need no CASE
            freed = (Batch(conn).listed("task_ids", sorted({r.execution.task_id for r in released}))
                     .listed("ids", [r.occurrence_id for r in released]))
            run(conn, self._statement(freed, "release_slots", lambda: update(slots).where(
                freed.one_of(slots.c.task_id, "task_ids"), freed.one_of(slots.c.occurrence_id, "ids"))
                .values(occurrence_id=None, execution_token=None, updated_at=db_now_ms())), freed.params)
        persisted: frozenset[str] = frozenset()
        if project:
            done = [replace(r.execution, status=r.status, reason=r.reason, attempts=tuple(r.attempts),  # type: ignore[arg-type]
                            log_persistence="pending") for r in requests if r.occurrence_id in won and r.attempts]
            try:
                persisted = frozenset(project_logs(conn, done, self._statements, mark=False))
            except Exception as exc:
                if is_retryable(exc):
                    raise  # lock contention: the whole transaction is run again
                raise ProjectionFailedError(f"{type(exc).__name__}: {exc}") from exc
        return FinishResult(frozenset(won), persisted)

    def expire_now(self, occurrence_id: str, token: str) -> bool:
        """Give up ownership so another node may take over at once (close of an idempotent run)."""

        def work(conn: Connection) -> bool:
            self._lock_rows(conn, executions.c.occurrence_id == occurrence_id)
            return one_row(conn.execute(update(executions).where(self._owned(occurrence_id, token))
                                .values(lease_until=db_now_ms() - 1, updated_at=self._touch(conn))))

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

    def _lock_expired(self, conn: Connection, execution: Execution) -> bool:
        """Lock the expired row for recovery, skipping it when another transaction holds it.

        A row locked by someone else belongs to a live transaction -- often its owner frozen
        mid-write (GC pause, SIGSTOP, VM freeze). Waiting for it would stall this node's whole
        tick (recovery runs before the claims): every other task would miss its minute. The
        row is skipped instead and looked at again next tick. Locking first also makes the
        following UPDATE read the DB clock after the lock is held (see ``_lock_rows``).
        """
        if dialect_kind(conn) == "sqlite":
            return True  # BEGIN IMMEDIATE already serialises writers
        locked = conn.execute(select(executions.c.occurrence_id).where(self._expired_by(execution))
                              .with_for_update(skip_locked=True)).first()
        return locked is not None

    def take_over(self, execution: Execution, new_token: str) -> bool:
        """Become the owner of an expired execution: new token, sequence + 1, fresh lease.

        The slot keeps pointing at the occurrence and takes the new token. False: someone
        else acted first (or the owner renewed in time).
        """

        def work(conn: Connection) -> bool:
            if not self._lock_expired(conn, execution):
                return False
            changed = conn.execute(
                update(executions).where(self._expired_by(execution))
                .values(execution_token=new_token, owner_node=self.node_id, sequence=executions.c.sequence + 1,
                        lease_until=db_now_ms() + self.lease_ms, updated_at=self._touch(conn))
            ).rowcount
            if changed == 1:
                conn.execute(update(slots).where(slots.c.task_id == execution.task_id,
                                                 slots.c.occurrence_id == execution.occurrence_id)
                             .values(execution_token=new_token, updated_at=db_now_ms()))
                Tally().takeover(execution.task_id).write(conn)
            return changed == 1

        return write(self.engine, work)

    def settle_expired(self, execution: Execution, status: str, reason: str, attempts: Sequence[Attempt],
                       release_slot: bool) -> bool:
        """Close an expired execution without running it: ``unknown`` (slot kept) when its
        handler may have run, ``interrupted`` (slot released) when no attempt ever began."""

        def work(conn: Connection) -> bool:
            if not self._lock_expired(conn, execution):
                return False
            changed = conn.execute(
                update(executions).where(self._expired_by(execution))
                .values(status=status, reason=reason, attempts=_json_attempts(attempts), lease_until=None,
                        log_persistence="pending" if attempts else None, updated_at=self._touch(conn))
            ).rowcount
            if changed == 1 and release_slot:
                self._release_slot(conn, execution.task_id, execution.occurrence_id)
            if changed == 1:
                Tally().execution(execution.task_id, status).write(conn)
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

    def journaled(self, occurrence_ids: Sequence[str]) -> set[str]:
        """Which of ``occurrence_ids`` the journal holds (primary-key look-ups, 500 a statement)."""

        def work(conn: Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(occurrence_ids), 500):
                chunk = list(occurrence_ids[start:start + 500])
                found.update(conn.execute(select(executions.c.occurrence_id)
                                          .where(executions.c.occurrence_id.in_(chunk))).scalars())
            return found

        return read(self.engine, work) if occurrence_ids else set()

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
                Tally().execution(execution.task_id, status).write(conn)
            return changed == 1

        return write(self.engine, work)

    def slot_holder(self, task_id: str) -> tuple[str | None, str | None]:
        query = select(slots.c.occurrence_id, slots.c.execution_token).where(slots.c.task_id == task_id)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return (row[0], row[1]) if row is not None else (None, None)

    def count_by_status(self) -> dict[str, int]:
        query = select(executions.c.status, func.count()).group_by(executions.c.status)
        return {status: int(n) for status, n in read(self.engine, lambda conn: conn.execute(query).all())}
