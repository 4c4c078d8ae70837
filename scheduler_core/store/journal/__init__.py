"""The journal (``executions``): the one place that writes it. Its public functions are the
row's transitions, each in the caller's transaction (the repositories in ``store/executions.py``,
``store/handoff.py``, ``store/logs.py`` and ``store/retention.py`` own the transactions), with
typed requests and answers (``rows.py``). ``transitions.py`` declares every transition once --
from-status, to-status, function, who, guard -- as docs/semantics.md ("6a. Journal transitions")
does; tests/unit/test_journal_transitions.py checks the two against each other, and
tests/unit/test_journal_ownership.py that no module outside this package writes the table."""

from scheduler_core.store.journal.claims import buffer, claim, delay, skip
from scheduler_core.store.journal.expiry import mark_interrupted, mark_unknown, take_over
from scheduler_core.store.journal.handoff import backfill, claim_queued, enqueue, miss, requeue, settle_queued
from scheduler_core.store.journal.owners import begin, finish, give_up, renew
from scheduler_core.store.journal.projection import log_row, project_logs
from scheduler_core.store.journal.retention import KEY_DAYS_MIN, deletable, key_days
from scheduler_core.store.journal.rows import (
    Backfilled,
    BeginRequest,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Deleted,
    FinishRequest,
    FinishResult,
    Missed,
    ProjectionFailedError,
    Writer,
    execution_from_row,
)
from scheduler_core.store.journal.settled import delete_retained, mark_persisted, resolve
from scheduler_core.store.journal.slots import SLOT_RETRY_PAUSES_S
from scheduler_core.store.journal.transitions import TRANSITIONS, Transition

__all__ = [
    "KEY_DAYS_MIN",
    "SLOT_RETRY_PAUSES_S",
    "TRANSITIONS",
    "Backfilled",
    "BeginRequest",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "Deleted",
    "FinishRequest",
    "FinishResult",
    "Missed",
    "ProjectionFailedError",
    "Transition",
    "Writer",
    "backfill",
    "begin",
    "buffer",
    "claim",
    "claim_queued",
    "delay",
    "deletable",
    "delete_retained",
    "enqueue",
    "execution_from_row",
    "finish",
    "give_up",
    "key_days",
    "log_row",
    "mark_interrupted",
    "mark_persisted",
    "mark_unknown",
    "miss",
    "project_logs",
    "renew",
    "requeue",
    "resolve",
    "settle_queued",
    "skip",
    "take_over",
]
