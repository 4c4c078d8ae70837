"""Expired leases: the expiry scan a node's tick runs when the tick snapshot says a lease ran
out. An idempotent execution with attempts left is taken over (by a node able to run it, with
a free thread); any other is settled -- ``interrupted`` when no attempt began, else
``unknown`` until an operator resolves it (docs/semantics.md). Also the in-memory views of a
claimed or queued row that the node and the scheduler build."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from scheduler_core.cron import random_id
from scheduler_core.model import Attempt, Execution
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.planner import Planner
from scheduler_core.runtime.runner import Ownership, Runner
from scheduler_core.statuses import AttemptStatus, ExecutionStatus, Trigger
from scheduler_core.store import ClaimRequest
from scheduler_core.store.transactions import is_unreachable

logger = logging.getLogger("scheduler_core.node")


class ExpiryRecovery:
    """``free_capacity()``: the node's free threads; ``submit(runner)``: hand a taken-over
    execution to the node's pool."""

    def __init__(self, ctx: RuntimeContext, planner: Planner, free_capacity: Callable[[], int],
                 submit: Callable[[Runner], None]) -> None:
        self.ctx = ctx
        self.planner = planner
        self.free_capacity = free_capacity
        self.submit = submit
        self.declined_lease: int | None = None  # earliest expired lease when every expired row was left
        # Takeovers whose COMMIT was not answered (the connection dropped, no primary): the token
        # it carried, read back on the next tick to learn whether this node owns the row now.
        self.unanswered: dict[str, tuple[Execution, str]] = {}

    def due(self, leases_expired: bool, earliest: int | None) -> bool:
        """Whether a scan can do anything: a lease expired, and not only the ones this node left."""
        return leases_expired and earliest != self.declined_lease

    def recover_expired(self, earliest: int | None) -> None:
        """Recover every expired row; when this node left them all (a takeover it cannot run),
        the scan is not repeated until the earliest lease changes."""
        declined = True
        for execution in self.ctx.executions.expired():
            try:
                declined = not self.recover(execution) and declined
            except Exception as exc:
                self.ctx.outage.report(exc, logger, "recovering %s failed; next tick retries", execution.occurrence_id)
                declined = False
        self.declined_lease = earliest if declined else None

    def resolve_unanswered(self) -> None:
        """Read back each takeover whose answer was lost: the row carries its token (running) when
        it committed, and then this node runs it now; otherwise it never happened, or another node
        acted since. Raises while the database still does not answer (kept for the next tick)."""
        unanswered = self.unanswered
        held = self.ctx.executions.held({o: token for o, (_, token) in unanswered.items()})
        self.unanswered = {}
        for occurrence_id, (execution, token) in unanswered.items():
            if occurrence_id in held:
                logger.info("takeover of %s found committed: its answer had been lost", occurrence_id)
                self._run_taken(execution, token)

    def _run_taken(self, execution: Execution, token: str) -> None:
        task = self.planner.task(execution.task_id)
        owned = replace(execution, sequence=execution.sequence + 1, execution_token=token, owner_node=self.ctx.node_id)
        self.submit(Runner(self.ctx, Ownership(owned, token, task, list(execution.attempts), reread=task is None)))

    def recover(self, execution: Execution) -> bool:
        """Take over or settle an expired execution; False when only another node can (it runs
        what this node cannot)."""
        task = self.planner.task(execution.task_id)
        started = execution.attempt > 0
        if task is not None and task.idempotent and execution.attempt < execution.max_attempts:
            if not self.ctx.can_run(task):
                return False  # left for a node able to run it
            if self.free_capacity() == 0:
                return True  # this node's next tick (or a node with room) takes it over
            token = random_id()
            try:
                taken = self.ctx.executions.take_over(execution, token)
            except Exception as exc:
                if is_unreachable(exc):  # it may have committed: the row will say (resolve_unanswered)
                    self.unanswered[execution.occurrence_id] = (execution, token)
                raise
            if taken:
                self._run_taken(execution, token)
            return True
        attempts = [_closed(a) for a in execution.attempts]
        if not started:
            # No attempt ever began: nothing can have happened. Interrupt and free the slot.
            self.ctx.executions.mark_interrupted(execution, "owner_lost_before_start", attempts)
            return True
        reason = "attempts_exhausted" if task is not None and task.idempotent else "lease_expired"
        if self.ctx.executions.mark_unknown(execution, reason, attempts):
            settled = replace(execution, status=ExecutionStatus.UNKNOWN, attempts=tuple(attempts))
            try:
                self.ctx.logs.project(settled)
            except Exception:
                logger.warning("log projection of %s failed (pending, repairable)", execution.occurrence_id)
        return True


def claimed_execution(r: ClaimRequest, node_id: str) -> Execution:
    """The in-memory view of a row we just claimed."""
    return Execution(
        occurrence_id=r.occurrence_id, task_id=r.task_id, task_revision=r.task_revision, trigger=Trigger(r.trigger),
        source=r.source, idempotency_key=r.idempotency_key, scheduled_minute=r.scheduled_minute,
        status=ExecutionStatus.RUNNING,
        reason=None, sequence=1, attempt=0, max_attempts=r.max_attempts, execution_token=r.token,
        owner_node=node_id, lease_until=None, attempts=(), log_persistence=None, resolved_by=None,
        resolution_reason=None, created_at=0, updated_at=0, not_before=r.not_before)


def queued_request(execution: Execution, token: str) -> ClaimRequest:
    """The claim of a queued row, as if this node had journaled it."""
    return ClaimRequest(occurrence_id=execution.occurrence_id, task_id=execution.task_id,
                        task_revision=execution.task_revision, trigger=execution.trigger,
                        max_attempts=execution.max_attempts, token=token, source=execution.source,
                        idempotency_key=execution.idempotency_key, scheduled_minute=execution.scheduled_minute,
                        not_before=execution.not_before)


def _closed(attempt: Attempt) -> Attempt:
    if attempt.status is not None:
        return attempt
    return replace(attempt, status=AttemptStatus.UNKNOWN,
                   error=f"owner {attempt.node_id} lost its lease before reporting")

