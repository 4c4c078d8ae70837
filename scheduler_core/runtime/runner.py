"""Running one owned execution to its end: begin, call the handler, retry, finish, log.

The rules it keeps (re-read definitions, lost leases publish nothing, retries, slots, logs):
docs/semantics.md, sections 5-8; its group commits: docs/architecture.md (5)."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler_core.cron import random_id
from scheduler_core.db.outage import Backoff
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Outcome
from scheduler_core.model import Attempt, Execution, ExecutionLog, LogPersistence, TaskDefinition
from scheduler_core.runtime.batching import Answer, FinishOutcome
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.failure_pause import pause_soon_if_failing
from scheduler_core.runtime.planner import definition_problem
from scheduler_core.statuses import AttemptStatus, ExecutionStatus, LogPersistenceStatus
from scheduler_core.store.executions import BeginRequest, FinishRequest
from scheduler_core.store.transactions import is_unreachable

logger = logging.getLogger("scheduler_core.runner")
CANCELLED_BY_DEFINITION = ("deleted", "disabled", "rescheduled", "unreadable")
SUPERSEDED = "superseded"  # a newer occurrence waits for the slot of a cancel_other / terminate_other task
UNCONFIRMED = LogPersistenceStatus.UNCONFIRMED
# A begin or terminal commit the database did not answer is asked again after these back-offs
# (db/outage.py), for as long as the lease holds: a failover's seconds without a primary.
RETRY_FIRST_S, RETRY_MOST_S = 0.05, 1.0
_pause = threading.Event().wait  # not time.sleep: behaves under libfaketime (the clock-skew tests)


class Next(enum.Enum):
    ATTEMPT = "attempt"  # the execution goes on with another attempt
    COMMITTING = "committing"  # the terminal commit is handed over; deciding it settles the runner


Step = ExecutionLog | Next  # what a step decides: the runner's record right now, or what comes next


@dataclass
class Ownership:
    """What the owner of an execution holds in memory."""

    execution: Execution  # the journal row as claimed / taken over
    token: str
    task: TaskDefinition | None  # the definition read after the claim (None: deleted)
    attempts: list[Attempt]
    reread: bool = False  # read the definition when the runner starts (after the claim)


class Runner:
    def __init__(self, ctx: RuntimeContext, owned: Ownership) -> None:
        self.ctx = ctx
        self.owned = owned
        self.signal = CancelSignal()
        self.done: Answer[ExecutionLog] = Answer()  # the caller-facing record, once settled
        # The terminal commit is handed to the group commit: the runner needs no thread any more
        # (the node's claims count the runners that still do).
        self.committing = False
        self._ahead: tuple[BeginRequest, Answer[bool] | None] | None = None  # the first begin, before a thread

    @property
    def can_begin_ahead(self) -> bool:
        """A fresh claim whose definition is known and fine: its first begin may be written
        before it has a thread. (Not a takeover, a queued run or a manual one: they read the
        definition on their thread first.)"""
        owned = self.owned
        return not (owned.reread or owned.attempts or owned.task is None or self.signal.is_set()
                    or definition_problem(owned.execution, owned.task))

    def begin_ahead(self) -> Answer[bool]:
        """Submit the first attempt's begin before this runner has a thread (``RunPool``, only
        when ``can_begin_ahead``): its handler is then called as soon as a thread takes it, the
        begin already durable, and no thread waits for a commit. (``RunPool`` queues the begins
        of many at once: ``ahead_request``, then ``ahead_answered`` with each one's answer.)"""
        answer = self.ctx.writes.begins.submit(self.ahead_request())
        self.ahead_answered(answer)
        return answer

    def ahead_request(self) -> BeginRequest:
        self._ahead = (self._begin_request(), None)
        return self._ahead[0]

    def ahead_answered(self, answer: Answer[bool]) -> None:
        self._ahead = (self._ahead[0], answer) if self._ahead is not None else None

    # --- entry -----------------------------------------------------------------------

    def run(self) -> ExecutionLog:
        """Run to the end and return the record (``trigger()`` runs it on the caller's thread)."""
        self.start()
        return self.done.result()

    def start(self) -> None:
        """Run until the terminal commit is handed to the node's group commit (a pool worker's
        entry: the worker is free again while the commit is written). Whoever made the runner
        registered it first (``RuntimeContext.register_runner``): its lease is renewed, and
        ``close()`` waits for it, from the claim on."""
        try:
            step = self._run()
        except Exception:
            logger.exception("runner for %s failed unexpectedly", self.owned.execution.occurrence_id)
            step = self._log(UNCONFIRMED, "internal error")
        if isinstance(step, ExecutionLog):
            self._settle(step)

    def _settle(self, log: ExecutionLog) -> None:
        """The end of this runner: unregister (lease no longer renewed) and publish the record."""
        try:
            self.ctx.unregister_runner(self)
        finally:
            if not self.done.done():
                self.done.set_result(log)

    def _run(self) -> Step:
        """The steps, up to the record (settle now) or the terminal commit handed over."""
        self._close_open_attempts()
        found: TaskDefinition | Exception | None = self.owned.task
        if self.owned.reread:
            found = self._read_definition()
        problem = definition_problem(self.owned.execution, found)
        if problem:
            return self._finish(ExecutionStatus.INTERRUPTED, problem, release=True)
        while True:
            if self.signal.is_set():
                return self._cancelled_before_start()
            if not self._begin_attempt():
                return self._log(UNCONFIRMED, "lease lost before the attempt began")
            outcome = self._call_handler()
            decided = self._decide(outcome)
            if decided is not Next.ATTEMPT:
                return decided

    # --- steps ---------------------------------------------------------------------------

    def _close_open_attempts(self) -> None:
        """Attempts begun by a previous owner that never reported: their effect is unknown."""
        self.owned.attempts = [a if a.status is not None else replace(
            a, status=AttemptStatus.UNKNOWN, error=f"owner {a.node_id} lost its lease before reporting (taken over)")
            for a in self.owned.attempts]

    def _begin_request(self) -> BeginRequest:
        """The next attempt, appended, and the begin that journals it."""
        number = len(self.owned.attempts) + 1
        attempt = Attempt(log_id=random_id(), attempt=number, sequence=self.owned.execution.sequence,
                          node_id=self.ctx.node_id, started_at=self.ctx.clock.now_ms())
        self.owned.attempts.append(attempt)
        return BeginRequest(self.owned.execution.occurrence_id, self.owned.token, tuple(self.owned.attempts))

    def _begin_attempt(self) -> bool:
        ahead, self._ahead = self._ahead, None
        request, answer = ahead if ahead is not None else (self._begin_request(), None)

        def ask() -> bool:  # the begin submitted ahead is asked first, then (if unanswered) again
            nonlocal answer
            pending, answer = answer, None
            return (pending or self.ctx.writes.begins.submit(request)).result()

        # The begin writes the same attempts again when it is repeated: a begin whose answer was
        # lost (no primary, a COMMIT cut) is written again until the database answers, and the
        # handler starts only once it is known committed -- on the primary the finish will reach.
        if self._until_answered(ask):
            return True
        self.owned.attempts.pop()
        return False

    def _until_answered(self, call: Callable[[], bool]) -> bool:
        """``call()``, asked again with back-off while the database does not answer, as long as
        this node still holds the lease (False once it does not: lost, nothing may be published)."""
        backoff = Backoff(RETRY_FIRST_S, RETRY_MOST_S)
        while True:
            try:
                answer = call()
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                self.ctx.outage.failed(exc)
                if not self.ctx.leases.holds(self.owned.token):
                    return False
                _pause(backoff.next())
                continue
            self.ctx.outage.answered()
            return answer

    def _request(self) -> ExecutionRequest:
        task = self.owned.task
        assert task is not None
        execution = self.owned.execution
        context = ExecutionContext(
            task_id=task.id, occurrence_id=execution.occurrence_id, execution_token=self.owned.token,
            sequence=execution.sequence, attempt=len(self.owned.attempts), trigger=execution.trigger,
            source=execution.source, scheduled_minute=execution.scheduled_minute, params=dict(task.params or {}))
        return ExecutionRequest(task=task, handler=task.handler or {"kind": "hook"}, context=context,
                                signal=self.signal, hooks=self.ctx.hooks)

    def _call_handler(self) -> Outcome:
        last, now = self.owned.attempts[-1], self.ctx.clock.now_ms()  # begun, no outcome yet: it starts now
        self.owned.attempts[-1] = Attempt(log_id=last.log_id, attempt=last.attempt, sequence=last.sequence,
                                          node_id=last.node_id, started_at=max(last.started_at, now))
        request = self._request()
        hooks = request.hooks
        hooks.observe_run("on_task_start", request)
        executor = self.ctx.executors.get(str(request.handler.get("kind", "hook")))
        if executor is None:
            outcome = Outcome(AttemptStatus.INTERRUPTED,
                              error=f"missing handler: no executor for {request.handler.get('kind')!r}")
        else:
            try:
                outcome = executor.execute(request)
            except Exception as exc:  # an executor bug must not leave the slot held forever
                outcome = Outcome(AttemptStatus.FAILED, error=f"executor error: {type(exc).__name__}: {exc}")
        name = "on_task_finish" if outcome.status == AttemptStatus.SUCCESS else "on_task_error"
        hooks.observe_run(name, request, status=outcome.status, result=outcome.result, error=outcome.error)
        self._record(outcome)
        return outcome

    def _record(self, outcome: Outcome) -> None:
        last = self.owned.attempts[-1]  # made directly: ``dataclasses.replace`` costs twice as much, per run
        self.owned.attempts[-1] = Attempt(last.log_id, last.attempt, last.sequence, last.node_id, last.started_at,
                                          self.ctx.clock.now_ms(), AttemptStatus(outcome.status), outcome.error,
                                          outcome.result)

    def _decide(self, outcome: Outcome) -> Step:
        """Turn an attempt's outcome into the execution's next step."""
        if self.signal.is_set():
            return self._cancelled_after_start()
        task = self.owned.task
        assert task is not None
        if outcome.status == AttemptStatus.SUCCESS:
            return self._finish(ExecutionStatus.SUCCESS, None, release=True)
        if outcome.status == AttemptStatus.INTERRUPTED:
            return self._finish(ExecutionStatus.INTERRUPTED, "handler", release=True)
        if task.idempotent and len(self.owned.attempts) < self.owned.execution.max_attempts:
            return self._wait_for_retry()
        if outcome.status == AttemptStatus.UNKNOWN:
            return self._finish(ExecutionStatus.UNKNOWN, "outcome_unknown", release=False)
        return self._finish(ExecutionStatus.FAILED, None, release=True)

    def _read_definition(self) -> TaskDefinition | Exception | None:
        try:
            self.owned.task = self.ctx.tasks.get(self.owned.execution.task_id)
        except Exception as exc:  # unreadable or unreachable: the attempt must not run blind
            self.owned.task = None
            return exc
        return self.owned.task

    def _wait_for_retry(self) -> Step:
        task = self.owned.task
        assert task is not None
        # The backoff of the definition as last read; the budget is the one stored at claim.
        delay_ms = task.retry.delay_before(len(self.owned.attempts) + 1) if task.retry else 0
        if self.signal.wait(delay_ms / 1000):
            return self._cancelled_before_start()
        problem = definition_problem(self.owned.execution, self._read_definition())
        if problem:
            return self._finish(ExecutionStatus.INTERRUPTED, problem, release=True)
        return Next.ATTEMPT

    def _cancelled_before_start(self) -> Step:
        """Cancelled while no handler of this owner was running (a begin submitted ahead may be
        journaled: its attempt is closed as interrupted, its handler never called)."""
        reason = self.signal.reason or "cancelled"
        if self._ahead is not None:
            self._ahead = None
            self._overrule_last_attempt(AttemptStatus.INTERRUPTED, f"cancelled before its handler was called: {reason}")
        if reason == "lease_lost":
            return self._log(UNCONFIRMED, "lease lost")
        return self._finish(ExecutionStatus.INTERRUPTED, reason, release=True)

    def _overrule_last_attempt(self, status: AttemptStatus, error: str) -> None:
        last = self.owned.attempts[-1]
        if last.status != status:
            self.owned.attempts[-1] = replace(last, status=status, error=error, result=None)

    def _cancelled_after_start(self) -> Step:
        reason = self.signal.reason or "cancelled"
        if reason == "lease_lost":
            return self._log(UNCONFIRMED, "lease lost while the handler ran")
        if reason == SUPERSEDED and self.owned.attempts[-1].status == AttemptStatus.UNKNOWN:
            # the executor cannot tell whether the work was done (a killed process, a request sent)
            return self._finish(ExecutionStatus.UNKNOWN, reason, release=False)
        if reason == SUPERSEDED:
            self._overrule_last_attempt(AttemptStatus.INTERRUPTED, "cancelled: a newer occurrence superseded it")
            return self._finish(ExecutionStatus.INTERRUPTED, reason, release=True)
        if reason in CANCELLED_BY_DEFINITION:
            self._overrule_last_attempt(AttemptStatus.INTERRUPTED, f"cancelled: task {reason}")
            return self._finish(ExecutionStatus.INTERRUPTED, reason, release=True)
        # Closing: the handler had started, so its effect may exist. Never publish success.
        self._overrule_last_attempt(AttemptStatus.UNKNOWN, "the node closed while the handler ran")
        task = self.owned.task
        if task is not None and task.idempotent and len(self.owned.attempts) < self.owned.execution.max_attempts:
            self.ctx.executions.expire_now(self.owned.execution.occurrence_id, self.owned.token)
            return self._log(UNCONFIRMED, "node closed; left for takeover")
        return self._finish(ExecutionStatus.UNKNOWN, "node_closed", release=False)

    # --- terminal commit and logs -------------------------------------------------------

    def _finish(self, status: ExecutionStatus, reason: str | None, release: bool) -> Next:
        """Hand the terminal commit (with the log projection) to the node's group commit; the
        runner settles when it is decided."""
        request = FinishRequest(self.owned.execution, self.owned.token, status, reason, tuple(self.owned.attempts),
                                release)
        self.committing = True
        self.ctx.writes.finishes.submit(request).add_done_callback(lambda f: self._finished(request, f))
        return Next.COMMITTING

    def _finished(self, request: FinishRequest, future: Answer[FinishOutcome]) -> None:
        try:
            log = self._after_finish(request, future)
        except Exception:  # the runner must settle whatever happens, or close() would wait forever
            logger.exception("settling %s failed", request.occurrence_id)
            log = self._log(UNCONFIRMED, "internal error after the terminal commit", request.status)
        if log is not None:
            self._settle(log)

    def _after_finish(self, request: FinishRequest, future: Answer[FinishOutcome]) -> ExecutionLog | None:
        """The record once the terminal commit is decided; None while it is being confirmed (its
        answer did not come: ``_confirm_finish`` settles the runner)."""
        try:
            outcome = future.result()
        except Exception as exc:
            if is_unreachable(exc) and self.ctx.leases.holds(self.owned.token):
                self.ctx.outage.failed(exc)
                # Not on the flusher's thread (this is its callback): the answer may take a failover.
                threading.Thread(target=self._confirm_finish, args=(request,), daemon=True,
                                 name=f"hai-confirm-{request.occurrence_id[:8]}").start()
                return None
            logger.warning("terminal commit of %s failed: %s", request.occurrence_id, exc)
            return self._log(UNCONFIRMED, f"terminal commit failed: {exc}", request.status)
        return self._decided(request, outcome)

    def _confirm_finish(self, request: FinishRequest) -> None:
        """A terminal commit whose answer never came (the connection dropped, no primary): the
        result is kept, and the commit is written again until the database answers. Written
        again, it changes nothing if the first one landed (the row is no longer running), and then
        the row itself says so: our token, our status. Given up only when the lease is lost while
        the database still does not answer: the takeover rules then decide, as for a dead owner."""
        backoff = Backoff(RETRY_FIRST_S, RETRY_MOST_S)
        while True:
            _pause(backoff.next())
            try:
                outcome = self._finish_again(request)
            except Exception as exc:
                if is_unreachable(exc) and self.ctx.leases.holds(self.owned.token):
                    self.ctx.outage.failed(exc)
                    continue
                logger.warning("terminal commit of %s unconfirmed: %s", request.occurrence_id, exc)
                log = self._log(UNCONFIRMED, f"terminal commit unconfirmed: {exc}", request.status)
                break
            self.ctx.outage.answered()
            try:
                log = self._decided(request, outcome)
            except Exception:
                logger.exception("settling %s failed", request.occurrence_id)
                log = self._log(UNCONFIRMED, "internal error after the terminal commit", request.status)
            break
        self._settle(log)

    def _finish_again(self, request: FinishRequest) -> FinishOutcome:
        outcome = self.ctx.writes.finishes.submit(request).result()
        if outcome.committed:
            return outcome
        row = self.ctx.executions.get(request.occurrence_id)
        if row is None or row.execution_token != request.token or row.status != request.status:
            return outcome  # not ours any more: the lease was lost before the first write landed
        logger.info("terminal commit of %s found committed: its answer had been lost", request.occurrence_id)
        persisted = LogPersistenceStatus(row.log_persistence) if row.log_persistence else LogPersistenceStatus.PERSISTED
        return FinishOutcome(True, LogPersistence(persisted))

    def _decided(self, request: FinishRequest, outcome: FinishOutcome) -> ExecutionLog:
        status = request.status
        if not outcome.committed:
            return self._log(UNCONFIRMED, "lease lost before the terminal commit", status)
        self.ctx.leases.remove(self.owned.token)  # settled: nothing left to renew
        self.owned.execution = replace(request.execution, status=status, reason=request.reason,
                                       attempts=tuple(request.attempts))
        if status == ExecutionStatus.SUCCESS and self.owned.task is not None and self.owned.task.delete_after_run:
            self._delete_after_run(self.owned.task)
        if status == ExecutionStatus.FAILED and self.owned.task is not None and self.owned.task.pause_on_failure:
            pause_soon_if_failing(self.ctx.tasks, self.ctx.executions, self.owned.task, self.owned.execution,
                                  self.ctx.clock.now_ms())
        return self._log(outcome.persistence.status, outcome.persistence.error, status)

    def _delete_after_run(self, task: TaskDefinition) -> None:
        try:
            if self.ctx.tasks.delete(task.id, revision=task.revision):
                self.ctx.forget_task(task.id)
        except Exception:
            logger.warning("delete_after_run of %s failed", task.id, exc_info=True)

    def _log(self, persistence: LogPersistenceStatus, note: str | None = None,
             status: ExecutionStatus | None = None) -> ExecutionLog:
        attempt = self.owned.attempts[-1] if self.owned.attempts else None
        return ExecutionLog.of(self.owned.execution, attempt,
                               LogPersistence(persistence, note), status)

