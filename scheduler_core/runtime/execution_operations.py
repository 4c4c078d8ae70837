"""The operator API: ``scheduler.execution.get / list_unknown / resolve_unknown /
list_log_failures / repair_log / repair_all``, and the dashboard's reads: keyset pages of the
journal (``page``) and the logs (``log_page``), bounded counts (``overview``,
``log_failure_count``) and the hourly chart (``hourly``). Repair replays the journal; it never
runs business code. Every argument is checked here, and a bad one raises ConfigError naming it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.config import SchedulerConfig
from scheduler_core.db.outage import Backoff
from scheduler_core.errors import ConfigError, ConflictError, ExecutionNotFoundError, LogPersistFailedError
from scheduler_core.model import Execution, ExecutionLog
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.unknown_review import BulkResolvePreview, BulkResolveResult, UnknownReview
from scheduler_core.statuses import (
    FAILURE_STATUSES,
    AttemptStatus,
    ExecutionStatus,
    LogPersistenceStatus,
    Resolution,
)
from scheduler_core.store.journal_queries import BoundedCount, JournalQueries, KeysetPage
from scheduler_core.store.journal_queries import Cursor as Cursor  # re-exported: the web's page cursors come from here
from scheduler_core.store.journal_queries import HourBucket as HourBucket  # the web reads its fields
from scheduler_core.store.logs import LogFilter
from scheduler_core.store.transactions import is_unreachable
from scheduler_core.store.unknown_review import UnknownReviewQueries
from scheduler_core.validation import (
    ID_MAX,
    PAGE_LIMIT,
    check_choice,
    check_id,
    check_int,
    check_ms,
    check_optional_choice,
    check_optional_id,
    check_optional_ms,
    check_optional_text,
    check_page,
)

REASON_MAX = 2_000  # an operator's reason for a resolution
COUNT_CAP = 10_000  # bounded counts stop here: the page shows "10,000+"
REPAIR_ROUND = 100  # log failures repaired per round of repair_all
READ_BACK_S = 15.0  # how long a resolution whose answer was lost waits for the database to tell
_pause = threading.Event().wait
logger = logging.getLogger("scheduler_core.operations")


def check_cursor(value: Any, field: str) -> Cursor | None:
    """A page cursor: None, a :class:`Cursor`, or its URL form ``<ms>.<id>``."""
    if value is None or isinstance(value, Cursor):
        cursor = value
    elif isinstance(value, str):
        key, dot, ident = value.partition(".")
        if not dot or not key.isascii() or not key.isdigit() or len(key) > 16 or not ident:
            raise ConfigError(field, f"must be a page cursor <ms>.<id> (got {value[:80]!r})")
        cursor = Cursor(int(key), ident)
    else:
        raise ConfigError(field, f"must be a page cursor (got {type(value).__name__})")
    if cursor is not None:
        check_ms(cursor.key, field)
        check_id(cursor.id, field)
    return cursor


def check_log_filter(task_id: Any, status: Any, trigger_source: Any, started_after: Any,
                     started_before: Any) -> LogFilter:
    """The filters of a log list, each checked (``started_after`` inclusive, ``started_before`` exclusive)."""
    return LogFilter(check_optional_id(task_id, "task_id"), check_optional_choice(status, "status", AttemptStatus),
                     check_optional_id(trigger_source, "trigger_source"),
                     check_optional_ms(started_after, "started_after"),
                     check_optional_ms(started_before, "started_before"))


def _check_cursors(before: Any, after: Any) -> tuple[Cursor | None, Cursor | None]:
    older, newer = check_cursor(before, "before"), check_cursor(after, "after")
    if older is not None and newer is not None:
        raise ConfigError("after", "give either before or after, not both")
    return older, newer


@dataclass(frozen=True)
class RepairResult:
    occurrence_id: str
    log_persistence: str | None  # what the journal says now
    repaired: bool  # this call wrote the projection


@dataclass(frozen=True)
class RepairAllResult:
    repaired: int  # projections this call wrote
    failed: int  # executions whose repair raised (an existing log row disagrees with the journal)
    remaining: BoundedCount  # log failures still pending afterwards
    rounds: int


@dataclass(frozen=True)
class Overview:
    """What needs an operator's attention, counted within bounds."""

    statuses: dict[str, BoundedCount]  # journal rows per status
    log_failures: BoundedCount  # journal rows whose log projection is pending
    tasks: int
    nodes_alive: int  # not stopped, heartbeat within three heartbeat intervals


@dataclass(frozen=True)
class RecentActivity:
    """The journal of the last ``hours`` hours (DB clock): counts per status and the newest failures."""

    hours: int
    since_ms: int  # the window's start (unix ms, DB clock)
    statuses: dict[str, BoundedCount]  # rows created in the window, per status
    failures: list[Execution]  # the newest failed / interrupted / unknown rows of the window, newest first


class ExecutionOperations:
    """``scheduler.execution``: the operator API over the journal and the logs."""

    def __init__(self, context: Callable[[], RuntimeContext], engine: Engine, config: SchedulerConfig) -> None:
        self._context = context  # the node's context; raises NOT_INITIALIZED before init()
        self._queries = JournalQueries(engine)
        self._config = config
        self._unknown_queries = UnknownReviewQueries(engine)
        self._review = UnknownReview(self._unknown_review_queries, lambda: self._context().executions, self.now_ms)

    def _unknown_review_queries(self) -> UnknownReviewQueries:
        self._context()  # NOT_INITIALIZED before init(), like every operator call
        return self._unknown_queries

    def _journal(self) -> JournalQueries:
        self._context()  # NOT_INITIALIZED before init(), like every operator call
        return self._queries

    def get(self, occurrence_id: str, scope: Scope = EVERY_TEAM) -> Execution:
        """One journal row; ExecutionNotFoundError when absent or of a team outside ``scope``
        (the same answer: docs/teams.md)."""
        check_id(occurrence_id, "occurrence_id")
        execution = self._context().executions.get(occurrence_id)
        if execution is None or (scope.teams is not None and not self._journal().in_scope(occurrence_id, scope)):
            raise ExecutionNotFoundError(f"execution {occurrence_id!r} not found", occurrence_id=occurrence_id)
        return execution

    def page(self, status: str | None = None, task_id: str | None = None, limit: int = 50,
             before: Cursor | str | None = None, after: Cursor | str | None = None,
             scope: Scope = EVERY_TEAM) -> KeysetPage[Execution]:
        """Journal rows newest first by (created_at, occurrence_id), one keyset page.

        ``before``: the ``older`` cursor of the page on screen (next, older page); ``after``: its
        ``newer`` cursor (previous page). Cursors are :class:`Cursor` or their ``token()``.
        """
        check_optional_choice(status, "status", ExecutionStatus)
        check_optional_id(task_id, "task_id")
        check_int(limit, "limit", 1, PAGE_LIMIT)
        older, newer = _check_cursors(before, after)
        return self._journal().execution_page(status, task_id, limit, older, newer, scope)

    def log_page(self, task_id: str | None = None, status: str | None = None, trigger_source: str | None = None,
                 started_after: int | None = None, started_before: int | None = None, limit: int = 50,
                 before: Cursor | str | None = None, after: Cursor | str | None = None,
                 scope: Scope = EVERY_TEAM) -> KeysetPage[ExecutionLog]:
        """Log rows newest first by (started_at, id), filtered, one keyset page.

        ``started_after`` is inclusive, ``started_before`` exclusive (unix ms).
        """
        where = check_log_filter(task_id, status, trigger_source, started_after, started_before)
        check_int(limit, "limit", 1, PAGE_LIMIT)
        older, newer = _check_cursors(before, after)
        return self._journal().log_page(where, limit, older, newer, scope)

    def log(self, log_id: str, scope: Scope = EVERY_TEAM) -> ExecutionLog | None:
        """One log row by its id (the attempt's UUID); None when absent (pruned, or never
        projected) or of a team outside ``scope``."""
        check_id(log_id, "log_id")
        return self._journal().log(log_id, scope)

    def now_ms(self) -> int:
        """The database clock now (unix ms): what a page's relative times ("3 s ago") count from."""
        return self._journal().now_ms()

    def log_failure_count(self, cap: int = COUNT_CAP, scope: Scope = EVERY_TEAM) -> BoundedCount:
        """Journal rows whose log projection is pending, counted up to ``cap``."""
        check_int(cap, "cap", 1, 1_000_000)
        return self._journal().log_failure_count(cap, scope)

    def overview(self, cap: int = COUNT_CAP, scope: Scope = EVERY_TEAM) -> Overview:
        """Bounded counts for the overview page (``scope``'s teams): each reads at most ``cap + 1`` index entries."""
        check_int(cap, "cap", 1, 1_000_000)
        journal = self._journal()
        alive_within = 3 * self._config.heartbeat_interval_ms
        return Overview(journal.status_counts(tuple(ExecutionStatus), cap, scope),
                        journal.log_failure_count(cap, scope), journal.task_count(scope),
                        journal.nodes_alive(alive_within))

    def recent(self, hours: int = 24, failures: int = 10, cap: int = COUNT_CAP,
               scope: Scope = EVERY_TEAM) -> RecentActivity:
        """What happened in the last ``hours`` hours: bounded counts per status of the rows created
        in the window, and its ``failures`` newest failures (failed, interrupted, unknown)."""
        check_int(hours, "hours", 1, 168)
        check_int(failures, "failures", 0, PAGE_LIMIT)
        check_int(cap, "cap", 1, 1_000_000)
        journal = self._journal()
        since, counts = journal.window_counts(tuple(ExecutionStatus), hours * 3_600_000, cap, scope)
        newest = journal.newest_of(FAILURE_STATUSES, since, failures, scope) if failures else []
        return RecentActivity(hours, since, counts, newest)

    def hourly(self, hours: int = 24, scope: Scope = EVERY_TEAM) -> list[HourBucket]:
        """Executions and failures (failed, interrupted, unknown) per hour of the DB clock,
        oldest first, the current hour last; hours without executions count zero."""
        check_int(hours, "hours", 1, 168)
        return self._journal().hourly(hours, scope)

    def leases(self, scope: Scope = EVERY_TEAM) -> list[Execution]:
        """Running executions (of ``scope``'s teams) with their owner node and lease deadline."""
        return self._journal().running(scope)

    def counts(self) -> dict[str, int]:
        """Journal rows per status."""
        return self._context().executions.count_by_status()

    def list_unknown(self, limit: int = 50, offset: int = 0) -> list[Execution]:
        check_page(limit, offset)
        return self._context().executions.list_by_status(ExecutionStatus.UNKNOWN, limit, offset)

    def unknown(self, task_id: str | None = None, reason: str | None = None, limit: int = 100,
                scope: Scope = EVERY_TEAM) -> list[Execution]:
        """Unknown executions (optionally of one task, one reason), the longest-waiting first."""
        return self._review.unknown(task_id, reason, limit, scope)

    def preview_bulk_resolve(self, task_id: str | None = None, reason: str | None = None,
                             scope: Scope = EVERY_TEAM) -> BulkResolvePreview:
        """Capture and count the unknown executions a bulk resolution of this filter would settle."""
        return self._review.preview_bulk_resolve(task_id, reason, scope)

    def bulk_resolve(self, preview: BulkResolvePreview, status: str, resolved_by: str | None,
                     reason: str, scope: Scope = EVERY_TEAM) -> BulkResolveResult:
        """Resolve exactly the previewed set (scheduler_core/runtime/unknown_review.py)."""
        return self._review.bulk_resolve(preview, status, resolved_by, reason, scope)

    def resolve_unknown(self, occurrence_id: str, status: str, expected_updated_at: int,
                        resolved_by: str | None = None, reason: str | None = None,
                        scope: Scope = EVERY_TEAM) -> Execution:
        """Settle an unknown execution as success or discarded (compare-and-set on updated_at)
        and release its task's slot. Exactly one of concurrent resolutions wins."""
        check_id(occurrence_id, "occurrence_id")
        verdict = check_choice(status, "status", Resolution)
        check_ms(expected_updated_at, "expected_updated_at")
        check_optional_text(resolved_by, "resolved_by", ID_MAX, single_line=True)
        check_optional_text(reason, "reason", REASON_MAX)
        execution = self.get(occurrence_id, scope)
        if execution.status != ExecutionStatus.UNKNOWN:
            raise ConflictError(f"execution {occurrence_id!r} is {execution.status}, not unknown",
                                occurrence_id=occurrence_id)
        repo = self._context().executions
        try:
            won = repo.resolve_unknown(execution, verdict, expected_updated_at, resolved_by, reason)
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            # The COMMIT may have landed: read the row once the database answers (a failover's
            # seconds), and say what it holds rather than guess; still no answer: the error stands.
            found = self._read_back(occurrence_id, exc)
            if _resolved_as(found, verdict, resolved_by, reason):
                return found
            if found.status != ExecutionStatus.UNKNOWN or found.updated_at != expected_updated_at:
                raise ConflictError(f"execution {occurrence_id!r} changed since it was read",
                                    occurrence_id=occurrence_id) from exc
            won = repo.resolve_unknown(execution, verdict, expected_updated_at, resolved_by, reason)
        if not won:
            raise ConflictError(f"execution {occurrence_id!r} changed since it was read "
                                f"(updated_at is no longer {expected_updated_at})", occurrence_id=occurrence_id)
        return self.get(occurrence_id)

    def _read_back(self, occurrence_id: str, error: Exception) -> Execution:
        """The row, read with back-off for up to ``READ_BACK_S`` while the database does not
        answer; then ``error`` is raised (nothing is known)."""
        backoff, deadline = Backoff(0.1, 2.0), time.monotonic() + READ_BACK_S
        while True:
            try:
                return self.get(occurrence_id)
            except Exception as exc:
                if not is_unreachable(exc) or time.monotonic() >= deadline:
                    raise error from exc
            _pause(min(backoff.next(), max(0.0, deadline - time.monotonic())))

    def list_log_failures(self, limit: int = 50, offset: int = 0, scope: Scope = EVERY_TEAM) -> list[Execution]:
        check_page(limit, offset)
        return self._journal().log_failures(limit, offset, scope)

    def repair_log(self, occurrence_id: str, scope: Scope = EVERY_TEAM) -> RepairResult:
        """Project a ``pending`` journal entry into the log table (safe on any node, concurrently)."""
        execution = self.get(occurrence_id, scope)
        if execution.log_persistence != LogPersistenceStatus.PENDING:
            return RepairResult(occurrence_id, execution.log_persistence, False)
        repaired = self._context().logs.project(execution)
        return RepairResult(occurrence_id, self.get(occurrence_id).log_persistence, repaired)

    def repair_all(self, max_rounds: int = 100, scope: Scope = EVERY_TEAM) -> RepairAllResult:
        """Drain the log failures: repair a round read at offset 0, then read offset 0 again.

        Offset 0 every round, because each repair removes its row from the list. Stops when
        nothing is left, when a round repaired nothing (what remains cannot be repaired now:
        a disagreeing log row, or someone else is draining), or after ``max_rounds`` rounds.
        A failure of one row is counted and the round goes on; such rows stay at the head of
        the list, so a hundred of them stop the drain until each is looked at.
        """
        check_int(max_rounds, "max_rounds", 1, 10_000)
        repaired = rounds = 0
        failed: set[str] = set()
        while rounds < max_rounds:
            batch = self.list_log_failures(REPAIR_ROUND, 0, scope)
            if not batch:
                break
            rounds += 1
            done = 0
            for execution in batch:
                try:
                    done += self.repair_log(execution.occurrence_id, scope).repaired
                except (LogPersistFailedError, ExecutionNotFoundError) as exc:
                    if execution.occurrence_id not in failed:
                        logger.warning("log repair of %s failed: %s", execution.occurrence_id, exc)
                    failed.add(execution.occurrence_id)
            repaired += done
            if done == 0:
                break
        return RepairAllResult(repaired, len(failed), self.log_failure_count(scope=scope), rounds)


def _resolved_as(execution: Execution, verdict: str, resolved_by: str | None, reason: str | None) -> bool:
    """The row holds this resolution, by this operator, for this reason: read back after a lost
    answer, it is this call's own write. (Not asked of a fresh call: of concurrent identical
    resolutions exactly one wins, the others are told what the row became.)"""
    return (execution.status == verdict and execution.resolved_by == resolved_by
            and execution.resolution_reason == reason)
