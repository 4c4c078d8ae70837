"""Every status family, once: each a ``StrEnum`` whose members are the strings stored in the database."""

from __future__ import annotations

from enum import StrEnum


class Trigger(StrEnum):
    """What made an occurrence."""

    CRON = "cron"
    MANUAL = "manual"
    CATCHUP = "catchup"  # a cron occurrence run late, after downtime, by the task's catch-up policy
    BACKFILL = "backfill"  # a past cron occurrence an operator asked to run (Scheduler.backfill)


# the runs the schedule made: what max_runs and pause on failure count
SCHEDULED_TRIGGERS = (Trigger.CRON, Trigger.CATCHUP)


class ExecutionStatus(StrEnum):
    """A journal row's status (docs/semantics.md, "Outcomes")."""

    QUEUED = "queued"  # journaled for a node able to run it; nobody owns it yet
    RUNNING = "running"  # claimed and owned under a lease
    SUCCESS = "success"
    FAILED = "failed"  # definite: the handler raised or answered, nothing ambiguous
    INTERRUPTED = "interrupted"  # ended before or without running (missing handler, definition changed, ...)
    UNKNOWN = "unknown"  # the effect may or may not have happened: keeps the slot until resolved
    DISCARDED = "discarded"  # an operator's decision about an unknown execution
    SKIPPED = "skipped"  # journaled without running (slot busy)
    MISSED = "missed"  # due, but no node ran it (no_node_running, no_capable_node)


TERMINAL_STATUSES = frozenset(ExecutionStatus) - {ExecutionStatus.QUEUED, ExecutionStatus.RUNNING}
FAILURE_STATUSES = (ExecutionStatus.FAILED, ExecutionStatus.INTERRUPTED, ExecutionStatus.UNKNOWN)


class AttemptStatus(StrEnum):
    """How one attempt ended: what an executor reports and a log row says."""

    SUCCESS = "success"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


class Resolution(StrEnum):
    """How an operator settles an unknown execution."""

    SUCCESS = "success"
    DISCARDED = "discarded"


class LogPersistenceStatus(StrEnum):
    """Whether an execution's attempt logs are known to be written."""

    PERSISTED = "persisted"
    PENDING = "pending"  # in the journal, not yet projected into the log table: repairable
    UNCONFIRMED = "unconfirmed"  # no committed terminal outcome can be assumed


class QueueStatus(StrEnum):
    """A notification's place in the delivery queue."""

    PENDING = "pending"
    PROCESSING = "processing"
    SENDING = "sending"
    SENT = "sent"
    UNKNOWN = "unknown"
    DEAD = "dead"
    DISCARDED = "discarded"


class DeliveryResolution(StrEnum):
    """How an operator settles an unknown delivery."""

    SENT = "sent"
    DISCARDED = "discarded"


# The dashboard's roles, lowest first: each can do what the ones before it can.
ROLES = ("viewer", "operator", "admin")
