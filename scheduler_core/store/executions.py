"""The journal's repository for a node: each write is one transaction around a transition of
``store/journal/`` (claim, begin, renew, finish, give up, take over, settle, resolve), and the
reads of the journal and the slots that the runtime needs."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions, slots
from scheduler_core.model import Attempt, Execution
from scheduler_core.statuses import (
    SCHEDULED_TRIGGERS,
    AttemptStatus,
    ExecutionStatus,
    Resolution,
    Trigger,
)
from scheduler_core.store import journal
from scheduler_core.store.journal import (
    SLOT_RETRY_PAUSES_S,
    BeginRequest,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    FinishRequest,
    FinishResult,
    ProjectionFailedError,
    Writer,
    execution_from_row,
)
from scheduler_core.store.transactions import read, write

T = TypeVar("T")
# The task ids of the warm-up's synthetic occurrences begin so: not a valid task id (spaces,
# parentheses), so no stored task has one, and their rows are rolled back anyway. Each warm-up
# has its own (two nodes starting at once do not wait on each other's uncommitted slot row).
WARM_UP_TASK = "(hai-scheduler warm-up"
WARM_UP_MINUTE_MS = 946_684_800_000  # 2000-01-01T00:00Z: a minute no occurrence of a real task has
WARM_CONNECTIONS = 3  # a busy minute's claims, begins and terminal commits: a connection each

__all__ = [
    "SLOT_RETRY_PAUSES_S",
    "BeginRequest",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "ExecutionRepository",
    "FinishRequest",
    "FinishResult",
    "execution_from_row",
]


class ExecutionRepository:
    """Journal and slot statements of one node. ``lease_ms`` is this node's lease length."""

    def __init__(self, engine: Engine, node_id: str, lease_ms: int) -> None:
        self.engine = engine
        self.writer = Writer(node_id, lease_ms)  # shared with the node's HandoffRepository

    @property
    def node_id(self) -> str:
        return self.writer.node_id

    @property
    def lease_ms(self) -> int:
        return self.writer.lease_ms

    # --- claim and the owner's writes ---------------------------------------------------

    def claim(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Journal each occurrence and take its task's slot, all in one transaction
        (``journal.claim``: claimed, skipped when the slot is held, exists when journaled before).
        Requests are processed in occurrence-id order so concurrent claimers lock alike."""
        if not requests:
            return []
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: journal.claim(conn, self.writer, ordered))

    def claim_then(self, requests: Sequence[ClaimRequest],
                   then: Callable[[Connection], T]) -> tuple[list[ClaimResult], T]:
        """``claim``, then ``then(conn)`` in the same transaction, after the claim's statements: a
        read the claimer needs right after its claim, without a transaction of its own."""
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(self.engine, lambda conn: (journal.claim(conn, self.writer, ordered), then(conn)))

    def warm_up(self, then: Callable[[Connection], object] | None = None) -> None:
        """Claim, begin and finish (with its log projection) one synthetic occurrence of no task,
        then ``then(conn)``, in one transaction that is rolled back: nothing is written, and the
        statements of a busy minute's starts are built and compiled before the node's first busy
        minute instead of during it (a node's first minute was measured ~2x slower than the
        next, bench/RESULTS.md section 2). On a server, on ``WARM_CONNECTIONS`` connections held
        at once: a busy minute's claims, begins and terminal commits each hold one, and a
        connection's first statements (a new server session) are slow too. Errors propagate; the
        caller decides (a node logs and goes on: its first minute then pays for it, as before)."""
        count = 1 if self.engine.dialect.name == "sqlite" else WARM_CONNECTIONS
        with contextlib.ExitStack() as held:
            for _ in range(count):
                self._warm_up(held.enter_context(self.engine.connect()), then)

    def _warm_up(self, conn: Connection, then: Callable[[Connection], object] | None) -> None:
        token, task_id = str(uuid.uuid4()), f"{WARM_UP_TASK} {uuid.uuid4().hex[:12]})"
        request = ClaimRequest(occurrence_id=str(uuid.uuid4()), task_id=task_id, task_revision=0,
                               trigger=Trigger.CRON, max_attempts=1, token=token, scheduled_minute=WARM_UP_MINUTE_MS)
        begun = Attempt(log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id=self.node_id,
                        started_at=WARM_UP_MINUTE_MS)
        ended = replace(begun, status=AttemptStatus.SUCCESS, finished_at=WARM_UP_MINUTE_MS)
        execution = Execution(
            occurrence_id=request.occurrence_id, task_id=task_id, task_revision=0, trigger=Trigger.CRON,
            source=None, idempotency_key=None, scheduled_minute=WARM_UP_MINUTE_MS, status=ExecutionStatus.RUNNING,
            reason=None, sequence=1, attempt=0, max_attempts=1, execution_token=token, owner_node=self.node_id,
            lease_until=None, attempts=(), log_persistence=None, resolved_by=None, resolution_reason=None,
            created_at=0, updated_at=0)
        transaction = conn.begin()
        try:
            journal.claim(conn, self.writer, [request])
            journal.begin(conn, self.writer, [BeginRequest(request.occurrence_id, token, (begun,))])
            journal.finish(conn, self.writer, [FinishRequest(
                execution, token, ExecutionStatus.SUCCESS, None, (ended,), True)], True)
            if then is not None:
                then(conn)
        finally:
            transaction.rollback()

    def begin_attempt(self, occurrence_id: str, token: str, attempts: Sequence[Attempt]) -> bool:
        """Record that attempt ``len(attempts)`` starts now, and extend the lease. False: the
        lease is lost, and the handler must not run."""
        return occurrence_id in self.begin_attempts([BeginRequest(occurrence_id, token, tuple(attempts))])

    def begin_attempts(self, requests: Sequence[BeginRequest], conn: Connection | None = None) -> set[str]:
        """``begin_attempt`` for many executions in one transaction (``journal.begin``); returns
        the ids that began. ``conn``: a connection the caller keeps (else one from the pool)."""
        if not requests:
            return set()
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        return write(conn or self.engine, lambda c: journal.begin(c, self.writer, ordered))

    def renew(self, tokens: Sequence[str]) -> set[str]:
        """Extend the leases of our running executions; returns the tokens that are LOST
        (``journal.renew``)."""
        if not tokens:
            return set()
        return write(self.engine, lambda conn: journal.renew(conn, self.writer, tokens))

    def finish(self, execution: Execution, token: str, status: ExecutionStatus, reason: str | None,
               attempts: Sequence[Attempt], release_slot: bool) -> bool:
        """The terminal commit: outcome + attempts (logs ``pending``) and the slot release unless
        ``release_slot`` is False. False: we lost the execution and nothing changed. The logs are
        not projected here (see ``finish_many``)."""
        request = FinishRequest(execution, token, status, reason, tuple(attempts), release_slot)
        return execution.occurrence_id in self.finish_many([request], project=False).committed

    def finish_many(self, requests: Sequence[FinishRequest], project: bool = True,
                    conn: Connection | None = None) -> FinishResult:
        """Terminal commits of many executions in one transaction, with their log projection
        (``journal.finish``).

        With ``project`` the committed rows' logs are inserted and the journal marked
        ``persisted`` in the same transaction. If that projection fails, the whole transaction is
        rolled back and the terminal commits are made again without it: the journal then says
        ``pending`` (the truth is in the journal either way) and ``projection_error`` says why.
        """
        if not requests:
            return FinishResult(frozenset(), frozenset())
        ordered = sorted(requests, key=lambda r: r.occurrence_id)
        bind = conn or self.engine
        error = None
        if project:
            try:
                return write(bind, lambda c: journal.finish(c, self.writer, ordered, True))
            except ProjectionFailedError as exc:
                error = str(exc)
        result = write(bind, lambda c: journal.finish(c, self.writer, ordered, False))
        return replace(result, projection_error=error)

    def expire_now(self, occurrence_id: str, token: str) -> bool:
        """Give up ownership so another node may take over at once (``journal.give_up``)."""
        return write(self.engine, lambda conn: journal.give_up(conn, occurrence_id, token))

    # --- recovery of expired leases -------------------------------------------------------

    def expired(self, limit: int = 100) -> list[Execution]:
        """Running executions whose lease has expired (DB clock), oldest first."""
        query = (select(executions).where(executions.c.status == ExecutionStatus.RUNNING,
                                          executions.c.lease_until < db_now_ms())
                 .order_by(executions.c.lease_until).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def take_over(self, execution: Execution, new_token: str) -> bool:
        """Become the owner of an expired execution (``journal.take_over``). False: someone else
        acted first (or the owner renewed in time)."""
        return write(self.engine, lambda conn: journal.take_over(conn, self.writer, execution, new_token))

    def mark_unknown(self, execution: Execution, reason: str, attempts: Sequence[Attempt]) -> bool:
        """Close an expired execution whose handler may have run: ``unknown``, slot kept
        (``journal.mark_unknown``). False: someone else acted first."""
        return write(self.engine, lambda conn: journal.mark_unknown(conn, execution, reason, attempts))

    def mark_interrupted(self, execution: Execution, reason: str, attempts: Sequence[Attempt]) -> bool:
        """Close an expired execution that never began an attempt: ``interrupted``, slot released
        (``journal.mark_interrupted``). False: someone else acted first."""
        return write(self.engine, lambda conn: journal.mark_interrupted(conn, execution, reason, attempts))

    # --- operator API -------------------------------------------------------------------

    def get(self, occurrence_id: str) -> Execution | None:
        query = select(executions).where(executions.c.occurrence_id == occurrence_id)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return execution_from_row(row) if row is not None else None

    def list_by_status(self, status: ExecutionStatus, limit: int, offset: int) -> list[Execution]:
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

    def held(self, tokens: dict[str, str]) -> set[str]:
        """Which occurrences of ``tokens`` (occurrence id -> execution token) are running under
        that token: how a write whose COMMIT answer was lost is read back (500 a statement)."""
        ids = list(tokens)

        def work(conn: Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):
                query = (select(executions.c.occurrence_id, executions.c.execution_token)
                         .where(executions.c.occurrence_id.in_(ids[start:start + 500]),
                                executions.c.status == ExecutionStatus.RUNNING))
                found.update(o for o, token in conn.execute(query) if tokens[o] == token)
            return found

        return read(self.engine, work) if ids else set()

    def resolve_unknown(self, execution: Execution, status: Resolution | str, expected_updated_at: int,
                        resolved_by: str | None, reason: str | None) -> bool:
        """Compare-and-set an unknown execution to success/discarded and free its slot
        (``journal.resolve``). ``status`` as the operator API checked it (``Resolution``)."""
        verdict = Resolution(status)
        return write(self.engine, lambda conn: journal.resolve(conn, execution, verdict, expected_updated_at,
                                                               resolved_by, reason))

    def slot_holder(self, task_id: str) -> tuple[str | None, str | None]:
        query = select(slots.c.occurrence_id, slots.c.execution_token).where(slots.c.task_id == task_id)
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return (row[0], row[1]) if row is not None else (None, None)

    def count_by_status(self) -> dict[str, int]:
        query = select(executions.c.status, func.count()).group_by(executions.c.status)
        return {status: int(n) for status, n in read(self.engine, lambda conn: conn.execute(query).all())}

    def last_outcomes(self, task_id: str, revision: int, count: int) -> list[ExecutionStatus]:
        """The statuses of the task's last ``count`` scheduled runs (cron, catch-up) of definition
        ``revision`` that ended ``success`` or ``failed``, newest first, by when they were journaled
        (its task index)."""
        query = (select(executions.c.status)
                 .where(executions.c.task_id == task_id, executions.c.task_revision == revision,
                        executions.c.trigger.in_(SCHEDULED_TRIGGERS),
                        executions.c.status.in_([ExecutionStatus.SUCCESS, ExecutionStatus.FAILED]))
                 .order_by(executions.c.created_at.desc(), executions.c.occurrence_id.desc()).limit(count))
        return [ExecutionStatus(s) for s in read(self.engine, lambda conn: conn.execute(query).scalars().all())]
