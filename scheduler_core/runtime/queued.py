"""Queued rows: catch-up runs and manual triggers journaled ``queued`` for a node able to run
them, cron occurrences waiting for their task's slot (its overlap policy; docs/semantics.md), and
jittered cron occurrences waiting for their delayed start (O8).
A node's tick claims those it can run, up to its free capacity, after the occurrences due in the
same tick, and ends those nobody can run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from scheduler_core.cron import random_id
from scheduler_core.model import Execution
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.planner import Planner
from scheduler_core.runtime.recovery import claimed_execution, queued_request
from scheduler_core.runtime.runner import SUPERSEDED, Ownership, Runner
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store import ClaimOutcome, ClaimRequest

QUEUED_BATCH = 200  # queued rows read per scan
logger = logging.getLogger("scheduler_core.node")


class QueuedClaims:
    """``runnable(task_id)``: whether the node can run a task (kind and group); ``free_capacity()``:
    how many more executions it takes; ``submit(runner)``: hand a claimed row to its pool."""

    def __init__(self, ctx: RuntimeContext, planner: Planner, runnable: Callable[[str], bool],
                 free_capacity: Callable[[], int], submit: Callable[[Runner], None]) -> None:
        self.ctx = ctx
        self.planner = planner
        self.runnable = runnable
        self.free_capacity = free_capacity
        self.submit = submit
        self._seen: int | None = None  # newest queued row when a scan found none this node runs
        self._wake: int | None = None  # the next delayed start of a jittered occurrence (DB clock)
        # Claims whose COMMIT was not answered (the connection dropped, no primary): each row is
        # read back on the next scan; carrying the claim's token (running), it is this node's to run.
        self.unanswered: dict[str, ClaimRequest] = {}

    def scan(self, latest_queued: int | None, now_ms: int) -> None:
        """Own the queued rows this node can run (up to its free capacity); end those nobody can
        run. Until a newer row is queued, or a jittered one's delayed start comes, a scan that
        found none of ours is not repeated."""
        if self.unanswered:
            self.resolve_unanswered()
        if latest_queued is None:
            self._wake = None
            return
        if latest_queued == self._seen and (self._wake is None or now_ms < self._wake):
            return
        # The next delayed start is read before the rows due: one whose start comes between the
        # two reads is then among the rows or the wake, never in neither (left queued for good).
        self._wake = self.ctx.handoff.next_delayed()
        rows = self.ctx.handoff.queued(QUEUED_BATCH)
        self._supersede(rows)
        runnable = [e for e in rows if self.runnable(e.task_id)]
        mine = _first_of_each_task([e for e in runnable if not self._held(e, now_ms)])
        requests = [self._request(e) for e in mine[:self.free_capacity()]]
        try:
            results = self.ctx.handoff.claim_queued(requests) if requests else []
        except Exception:  # committed or not: read back on the next scan (left to expire, never run)
            self.unanswered.update((r.occurrence_id, r) for r in requests)
            raise
        claimed = {r.occurrence_id for r in results if r.outcome == ClaimOutcome.CLAIMED}
        for r in requests:
            if r.occurrence_id in claimed:
                self._run(r)
        self._end_unrunnable([e for e in rows if not self.runnable(e.task_id)], now_ms)
        self._seen = latest_queued if not runnable else None  # rows it can run wait: scan again next tick

    def _run(self, request: ClaimRequest) -> None:
        self.submit(Runner(self.ctx, Ownership(claimed_execution(request, self.ctx.node_id), request.token, None, [],
                                               reread=True)))

    def resolve_unanswered(self) -> None:
        """Read back each claim whose answer was lost: a row running under its token is this
        node's, and runs now; any other never became ours (still queued, waiting again, skipped,
        or another node's). Raises while the database does not answer (kept for the next scan)."""
        unanswered = self.unanswered
        held = self.ctx.executions.held({o: r.token for o, r in unanswered.items()})
        self.unanswered = {}
        for occurrence_id, request in unanswered.items():
            if occurrence_id in held:
                logger.info("claim of queued %s found committed: its answer had been lost", occurrence_id)
                self._run(request)

    def _request(self, execution: Execution) -> ClaimRequest:
        """The claim of a queued row; a jittered one with its task's overlap policy (whether it
        waits for a held slot, ``journal.claim_queued``)."""
        request = queued_request(execution, random_id())
        task = self.planner.task(execution.task_id)
        if execution.not_before is None or task is None:
            return request
        return replace(request, waiting_limit=task.overlap_policy.waiting_limit)

    def _held(self, execution: Execution, now_ms: int) -> bool:
        """A buffered cron occurrence of a paused task waits on, until the task is resumed (a pause
        starts no cron occurrence; it is the operator's to end)."""
        task = self.planner.task(execution.task_id)
        paused = task.paused if task is not None else None
        return execution.trigger == Trigger.CRON and paused is not None and paused.active(now_ms)

    def _supersede(self, rows: list[Execution]) -> None:
        """A cron occurrence waits for the slot of a task whose overlap policy is cancel_other or
        terminate_other: its run on this node is asked to stop (``superseded``). The runner ends
        it as the executor could tell (``Runner``): interrupted, or unknown when it cannot be known."""
        waiting = {e.task_id for e in rows if e.trigger == Trigger.CRON}
        for runner in self.ctx.runners() if waiting else ():
            task = self.planner.task(runner.owned.execution.task_id)
            if task is not None and task.id in waiting and task.overlap_policy.supersedes:
                runner.signal.cancel(SUPERSEDED)

    def _end_unrunnable(self, rows: list[Execution], now_ms: int) -> None:
        """Queued rows that wait longer than a tick: of a task gone, ``interrupted``; of one no
        live node can run, ``missed`` (``no_capable_node``)."""
        waited = [e for e in rows if e.created_at <= now_ms - self.ctx.config.tick_interval_ms]
        for execution in waited:
            task = self.planner.task(execution.task_id)
            if task is None:
                self.ctx.handoff.settle_queued(execution, ExecutionStatus.INTERRUPTED, "deleted")
            elif not self.ctx.capable_node_alive(task):
                self.ctx.handoff.settle_queued(execution, ExecutionStatus.MISSED, "no_capable_node")


def _first_of_each_task(rows: list[Execution]) -> list[Execution]:
    """The earliest queued row of each task (by minute, then as read): a claim seats one
    occurrence a task at a time, and the rest would be owned only to be queued again."""
    first: dict[str, Execution] = {}
    for e in rows:
        held = first.get(e.task_id)
        if held is None or (e.scheduled_minute or 0) < (held.scheduled_minute or 0):
            first[e.task_id] = e
    return [e for e in rows if first[e.task_id] is e]
