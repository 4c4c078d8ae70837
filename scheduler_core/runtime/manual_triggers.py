"""Manual triggers: "run this task now", with or without an idempotency key (docs/semantics.md S6).

The one place a manual occurrence id is minted. The occurrence is journaled by a claim that
competes for the task's slot like a cron one; the node that wins runs it on a registered runner
(``close()`` waits for it), a node that cannot run the task hands it to one that can, and a
repeated key finds the occurrence already journaled instead of running again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from scheduler_core.cron import manual_occurrence_id, new_occurrence_id, random_id
from scheduler_core.db.outage import Backoff, is_unreachable
from scheduler_core.errors import TaskNotFoundError
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.recovery import claimed_execution
from scheduler_core.runtime.runner import Ownership, Runner
from scheduler_core.statuses import Trigger
from scheduler_core.store import ClaimOutcome, ClaimRequest, ClaimResult
from scheduler_core.store.handoff import Missed
from scheduler_core.validation import check_id, check_optional_id

CLAIM_ANSWER_S = 15.0  # how long a manual claim the database did not answer is asked again
_pause = threading.Event().wait


def occurrence_id_for(task_id: str, key: str | None) -> str:
    """A manual trigger's occurrence id: derived from (task, key) so that a repeated key finds the
    same occurrence; random without a key. ``key`` has passed ``check_optional_id``."""
    return manual_occurrence_id(task_id, key) if key else new_occurrence_id()


def claim_manual(ctx: RuntimeContext, task_id: str, source: str | None,
                 idempotency_key: str | None) -> tuple[str, Runner | None]:
    """Journal a manual occurrence; the registered runner when this node won its slot."""
    check_id(task_id, "task_id")
    source = check_optional_id(source, "source")
    key = check_optional_id(idempotency_key, "idempotency_key")
    task = ctx.tasks.get(task_id)
    if task is None:
        raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
    occurrence_id = occurrence_id_for(task_id, key)
    request = ClaimRequest(occurrence_id=occurrence_id, task_id=task_id, task_revision=task.revision,
                           trigger=Trigger.MANUAL, max_attempts=task.max_attempts, token=random_id(),
                           source=source, idempotency_key=key)
    ctx.clock.observe(ctx.tasks.tick_snapshot().now_ms)  # before the claim: nothing may fail after it
    if not ctx.can_run(task):
        _hand_off(ctx, task, request)
        return occurrence_id, None
    result = _claim_until_answered(ctx, request)
    if result.outcome != ClaimOutcome.CLAIMED:
        return occurrence_id, None
    runner = Runner(ctx, Ownership(claimed_execution(request, ctx.node_id), request.token, None, [], reread=True))
    ctx.register_runner(runner)  # before it runs: close() waits for it from now on
    return occurrence_id, runner


def _claim_until_answered(ctx: RuntimeContext, request: ClaimRequest) -> ClaimResult:
    """The claim; asked again with the same token while the database does not answer (for up to
    ``CLAIM_ANSWER_S``), so that a claim whose COMMIT landed but whose answer was lost is
    recognised as ours and run (docs/semantics.md S6) rather than left to expire."""
    backoff, deadline = Backoff(0.1, 2.0), time.monotonic() + CLAIM_ANSWER_S
    while True:
        try:
            (result,) = ctx.executions.claim([request])
        except Exception as exc:
            if not is_unreachable(exc) or time.monotonic() >= deadline:
                raise
            ctx.outage.failed(exc)
            request = replace(request, retry=True)
            _pause(min(backoff.next(), max(0.0, deadline - time.monotonic())))
            continue
        ctx.outage.answered()
        return result


def _hand_off(ctx: RuntimeContext, task: TaskDefinition, request: ClaimRequest) -> None:
    """A manual occurrence this node cannot run: queued for a live node that can (it runs it at
    its next tick), or -- when no such node is alive -- journaled ``missed`` at once."""
    if ctx.capable_node_alive(task):
        ctx.handoff.enqueue([request])
    else:
        ctx.handoff.journal_missed([Missed(request, "no_capable_node")])
