"""A journal row's shape: what the transitions take and answer (requests, results, outcomes),
the columns of a new row (written once, for every way a row is made), and reading a row back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Connection, Row

from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import executions
from scheduler_core.model import Attempt, Execution
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.store.dialect import StatementCache, greatest
from scheduler_core.store.owner_write import Owned

OWNED = Owned(executions.c.occurrence_id, executions.c.updated_at)  # the rows an owner's write locks


@dataclass(frozen=True)
class Writer:
    """The node that writes: its id, the lease it sets on what it owns, and the statements it
    built once (PostgreSQL's batch statements, ``dialect.StatementCache``)."""

    node_id: str
    lease_ms: int
    statements: StatementCache = field(default_factory=StatementCache, compare=False, repr=False)


class ClaimOutcome(StrEnum):
    """What a claim of one occurrence came to."""

    CLAIMED = "claimed"  # ours: running under our token, in its task's slot
    SKIPPED = "skipped"  # journaled by us, and ``skipped`` (slot_busy)
    EXISTS = "exists"  # journaled before, not by this claim (or no longer queued)
    WAITING = "waiting"  # queued for its task's slot: a catch-up run, or a cron occurrence its overlap policy buffers


@dataclass(frozen=True)
class ClaimRequest:
    """An occurrence a node wants to own (or to journal for another node, or as missed)."""

    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: Trigger  # cron | manual | catchup
    max_attempts: int
    token: str  # this claimer's token for this occurrence (never shared with another claimer)
    source: str | None = None
    idempotency_key: str | None = None
    scheduled_minute: int | None = None
    # The same request again after a claim call failed (its COMMIT may have been applied):
    # a row journaled with this token is then this claimer's own (see ``claims.claim``).
    retry: bool = False
    # How many of the task's cron occurrences may wait for its held slot (its overlap policy's
    # ``waiting_limit``); 0: one whose slot is held is skipped.
    waiting_limit: int = 0
    # The task has a ``max_runs`` (as the claimer knows it): the claim locks and reads its limit
    # (``run_limits``); a claim of a task without one reads nothing more.
    run_limited: bool = False
    # A jittered cron occurrence: journaled ``queued`` (reason ``jitter``) until this time (DB
    # clock), then claimed from the queue like a buffered one (docs/semantics.md O8). None: now.
    not_before: int | None = None


@dataclass(frozen=True)
class ClaimResult:
    occurrence_id: str
    outcome: ClaimOutcome


@dataclass(frozen=True)
class Missed:
    """An occurrence no node ran; with ``until`` and ``count``, a summary of several minutes."""

    request: ClaimRequest  # its identity: occurrence id, task, revision, trigger, scheduled minute
    reason: str  # no_node_running | no_capable_node | ...
    until: int | None = None  # a summary row: the last minute it stands for
    count: int | None = None  # a summary row: how many minutes it stands for


@dataclass(frozen=True)
class Backfilled:
    """What a backfill did to each minute it was given (occurrence ids, in the order given)."""

    new: list[str]  # not journaled before: queued now
    again: list[str]  # journaled missed or skipped (never ran): queued now
    already: list[str]  # journaled otherwise (ran, runs, waits, or a summary row): left as it was


@dataclass(frozen=True)
class BeginRequest:
    """The owner starts attempt ``len(attempts)`` (the last one) of an execution now."""

    occurrence_id: str
    token: str
    attempts: Sequence[Attempt]


def first_lateness(execution: Execution, attempts: Sequence[Attempt]) -> tuple[str, int] | None:
    """The fire lateness to count, with its task, when ``execution``'s ownership ends (its owner's
    terminal commit, a takeover, the expiry to ``unknown``): a cron occurrence whose first owner
    (sequence 1) began attempt 1, that attempt's start minus the scheduled minute (a jittered
    one's: minus its delayed start, ``not_before``); None otherwise. Only the first ownership's
    end counts it, so each occurrence counts once: its first owner's begin is not the place (a
    begin batch is on the path of every start; bench/PROFILE.md)."""
    if execution.trigger != Trigger.CRON or execution.scheduled_minute is None or execution.sequence != 1:
        return None
    first = next((a for a in attempts if (a.attempt, a.sequence) == (1, 1)), None)
    due = max(execution.scheduled_minute, execution.not_before or 0)  # a jittered one: its delayed start
    return None if first is None else (execution.task_id, first.started_at - due)


@dataclass(frozen=True)
class FinishRequest:
    """The owner's terminal commit of one execution."""

    execution: Execution
    token: str
    status: ExecutionStatus  # success | failed | interrupted | unknown
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


@dataclass(frozen=True)
class Deleted:
    """What one retention delete took: journal rows, and the attempt log rows that went with them."""

    journal: int
    logs: int


class ProjectionFailedError(Exception):
    """The log projection inside a terminal commit failed; the transaction is rolled back and
    the terminal commit is made again without it."""


def identity(r: ClaimRequest, token: str | None) -> dict[str, Any]:
    """The columns of a new journal row that differ per occurrence: what it is, and the token
    of its owner (None: nobody owns it)."""
    return {"occurrence_id": r.occurrence_id, "task_id": r.task_id, "task_revision": r.task_revision,
            "trigger": r.trigger, "source": r.source, "idempotency_key": r.idempotency_key,
            "scheduled_minute": r.scheduled_minute, "max_attempts": r.max_attempts, "execution_token": token}


def new_row(now: Any, owner: Writer | None = None) -> dict[str, Any]:
    """The columns every new journal row of one statement gets (``now``: the DB clock, read once):
    no attempt yet, first ownership generation; owned by ``owner`` under its lease from ``now``
    (a claim), or by nobody (queued, missed)."""
    return {
        "sequence": 1, "attempt": 0, "next_attempt_at": None, "attempts": [], "log_persistence": None,
        "resolved_by": None, "resolution_reason": None, "created_at": now, "updated_at": now,
        "owner_node": owner.node_id if owner else None, "lease_until": now + owner.lease_ms if owner else None,
    }


def touch(conn: Connection) -> Any:
    """``updated_at`` of a change: never goes back, even if the DB clock steps back."""
    return greatest(conn, db_now_ms(), executions.c.updated_at + 1)


def json_attempts(attempts: Iterable[Attempt]) -> list[dict[str, Any]]:
    return [a.to_json() for a in attempts]


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
        updated_at=to_ms(data["updated_at"], "updated_at"),
        not_before=optional_ms(data.get("next_attempt_at"), "next_attempt_at"))
