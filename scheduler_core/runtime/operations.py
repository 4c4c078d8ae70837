"""The operator API: ``scheduler.execution.get / list_unknown / resolve_unknown /
list_log_failures / repair_log / repair_all``, and the dashboard's reads: keyset pages of the
journal (``page``) and the logs (``log_page``), bounded counts (``overview``,
``log_failure_count``) and the hourly chart (``hourly``). Repair replays the journal; it never
runs business code. Every argument is checked here, and a bad one raises ConfigError naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler_core.errors import ConfigError, ConflictError, ExecutionNotFoundError, LogPersistFailedError
from scheduler_core.model import Execution, ExecutionLog, LogPersistence
from scheduler_core.store.journal_queries import (
    BoundedCount,
    Cursor,
    HourBucket,
    JournalQueries,
    KeysetPage,
)
from scheduler_core.store.logs import LogFilter

if TYPE_CHECKING:
    from scheduler_core.runtime.scheduler import Scheduler

RESOLUTIONS = ("success", "discarded")
EXECUTION_STATUSES = ("running", "success", "failed", "interrupted", "unknown", "discarded", "skipped")
LOG_STATUSES = ("success", "failed", "interrupted", "unknown")  # what an attempt's log row can say
COUNT_CAP = 10_000  # bounded counts stop here: the page shows "10,000+"
REPAIR_ROUND = 100  # log failures repaired per round of repair_all
MAX_ID = 128
MAX_MS = 2**53 - 1
logger = logging.getLogger("scheduler_core.operations")


def check_page(limit: Any, offset: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ConfigError("limit", f"must be an integer between 1 and 100 (got {limit!r})")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 1_000_000:
        raise ConfigError("offset", f"must be an integer between 0 and 1000000 (got {offset!r})")


def _check_int(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(name, f"must be an integer between {low} and {high} (got {value!r})")
    return value


def _check_id(name: str, value: Any) -> str | None:
    """An optional id filter: None, or 1..128 characters without NUL."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID or "\x00" in value:
        raise ConfigError(name, f"must be a text of 1 to {MAX_ID} characters without NUL (got {value!r})")
    return value


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)} (got {value!r})")
    return value  # type: ignore[no-any-return]


def parse_cursor(value: Any, name: str) -> Cursor | None:
    """A page cursor: None, a :class:`Cursor`, or its URL form ``<ms>.<id>``."""
    if value is None or isinstance(value, Cursor):
        cursor = value
    elif isinstance(value, str):
        key, dot, ident = value.partition(".")
        if not dot or not key.isascii() or not key.isdigit() or not ident:
            raise ConfigError(name, f"must be a page cursor <ms>.<id> (got {value!r})")
        cursor = Cursor(int(key), ident)
    else:
        raise ConfigError(name, f"must be a page cursor (got {value!r})")
    if cursor is not None:
        if isinstance(cursor.key, bool) or not isinstance(cursor.key, int) or not 0 <= cursor.key <= MAX_MS:
            raise ConfigError(name, f"the cursor's time must be unix milliseconds (got {cursor.key!r})")
        _check_id(name, cursor.id)
    return cursor


def _check_cursors(before: Any, after: Any) -> tuple[Cursor | None, Cursor | None]:
    older, newer = parse_cursor(before, "before"), parse_cursor(after, "after")
    if older is not None and newer is not None:
        raise ConfigError("after", "give either before or after, not both")
    return older, newer


def _check_ms(name: str, value: Any) -> int | None:
    if value is not None:
        _check_int(name, value, 0, MAX_MS)
    return value  # type: ignore[no-any-return]


def log_of_execution(execution: Execution) -> ExecutionLog:
    """The caller-facing record of a journaled execution (its last attempt)."""
    from scheduler_core.runtime.runner import make_log

    persistence = LogPersistence("pending" if execution.log_persistence == "pending" else "persisted")
    attempt = execution.attempts[-1] if execution.attempts else None
    status = execution.status if execution.status in ("unknown", "discarded", "skipped", "interrupted") else None
    return make_log(execution, attempt, persistence, status)


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


class ExecutionOperations:
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._queries: JournalQueries | None = None

    def _journal(self) -> JournalQueries:
        self._scheduler.context()  # NOT_INITIALIZED before init(), like every operator call
        if self._queries is None:
            self._queries = JournalQueries(self._scheduler.engine)
        return self._queries

    def get(self, occurrence_id: str) -> Execution:
        execution = self._scheduler.context().executions.get(occurrence_id)
        if execution is None:
            raise ExecutionNotFoundError(f"execution {occurrence_id!r} not found", occurrence_id=occurrence_id)
        return execution

    def recent(self, status: str | None = None, task_id: str | None = None, limit: int = 50,
             offset: int = 0) -> list[Execution]:
        """Journal rows, newest first, filtered by status and/or task."""
        check_page(limit, offset)
        if status is not None and status not in EXECUTION_STATUSES:
            raise ConfigError("status", f"must be one of {', '.join(EXECUTION_STATUSES)} (got {status!r})")
        return self._scheduler.context().executions.recent(status, task_id, limit, offset)

    def page(self, status: str | None = None, task_id: str | None = None, limit: int = 50,
             before: Cursor | str | None = None, after: Cursor | str | None = None) -> KeysetPage[Execution]:
        """Journal rows newest first by (created_at, occurrence_id), one keyset page.

        ``before``: the ``older`` cursor of the page on screen (next, older page); ``after``: its
        ``newer`` cursor (previous page). Cursors are :class:`Cursor` or their ``token()``.
        """
        _check_choice("status", status, EXECUTION_STATUSES)
        _check_id("task_id", task_id)
        _check_int("limit", limit, 1, 100)
        older, newer = _check_cursors(before, after)
        return self._journal().execution_page(status, task_id, limit, older, newer)

    def log_page(self, task_id: str | None = None, status: str | None = None, trigger_source: str | None = None,
                 started_after: int | None = None, started_before: int | None = None, limit: int = 50,
                 before: Cursor | str | None = None, after: Cursor | str | None = None) -> KeysetPage[ExecutionLog]:
        """Log rows newest first by (started_at, id), filtered, one keyset page.

        ``started_after`` is inclusive, ``started_before`` exclusive (unix ms).
        """
        _check_id("task_id", task_id)
        _check_choice("status", status, LOG_STATUSES)
        _check_id("trigger_source", trigger_source)
        _check_ms("started_after", started_after)
        _check_ms("started_before", started_before)
        _check_int("limit", limit, 1, 100)
        older, newer = _check_cursors(before, after)
        where = LogFilter(task_id, status, trigger_source, started_after, started_before)
        return self._journal().log_page(where, limit, older, newer)

    def log(self, log_id: str) -> ExecutionLog | None:
        """One log row by its id (the attempt's UUID); None when absent (pruned, or never projected)."""
        if _check_id("log_id", log_id) is None:
            raise ConfigError("log_id", "is required")
        return self._journal().log(log_id)

    def log_failure_count(self, cap: int = COUNT_CAP) -> BoundedCount:
        """Journal rows whose log projection is pending, counted up to ``cap``."""
        _check_int("cap", cap, 1, 1_000_000)
        return self._journal().log_failure_count(cap)

    def overview(self, cap: int = COUNT_CAP) -> Overview:
        """Bounded counts for the overview page: each reads at most ``cap + 1`` index entries."""
        _check_int("cap", cap, 1, 1_000_000)
        journal = self._journal()
        alive_within = 3 * self._scheduler.config.heartbeat_interval_ms
        return Overview(journal.status_counts(EXECUTION_STATUSES, cap), journal.log_failure_count(cap),
                        journal.task_count(), journal.nodes_alive(alive_within))

    def hourly(self, hours: int = 24) -> list[HourBucket]:
        """Executions and failures (failed, interrupted, unknown) per hour of the DB clock,
        oldest first, the current hour last; hours without executions count zero."""
        _check_int("hours", hours, 1, 168)
        return self._journal().hourly(hours)

    def leases(self) -> list[Execution]:
        """Running executions with their owner node and lease deadline."""
        return self._scheduler.context().executions.running()

    def counts(self) -> dict[str, int]:
        """Journal rows per status."""
        return self._scheduler.context().executions.count_by_status()

    def list_unknown(self, limit: int = 50, offset: int = 0) -> list[Execution]:
        check_page(limit, offset)
        return self._scheduler.context().executions.list_by_status("unknown", limit, offset)

    def resolve_unknown(self, occurrence_id: str, status: str, expected_updated_at: int,
                        resolved_by: str | None = None, reason: str | None = None) -> Execution:
        """Settle an unknown execution as success or discarded (compare-and-set on updated_at)
        and release its task's slot. Exactly one of concurrent resolutions wins."""
        if status not in RESOLUTIONS:
            raise ConfigError("status", f"must be one of {', '.join(RESOLUTIONS)} (got {status!r})")
        if isinstance(expected_updated_at, bool) or not isinstance(expected_updated_at, int):
            raise ConfigError("expected_updated_at",
                              f"must be the execution's updated_at (got {expected_updated_at!r})")
        execution = self.get(occurrence_id)
        if execution.status != "unknown":
            raise ConflictError(f"execution {occurrence_id!r} is {execution.status}, not unknown",
                                occurrence_id=occurrence_id)
        repo = self._scheduler.context().executions
        if not repo.resolve_unknown(execution, status, expected_updated_at, resolved_by, reason):
            raise ConflictError(f"execution {occurrence_id!r} changed since it was read "
                                f"(updated_at is no longer {expected_updated_at})", occurrence_id=occurrence_id)
        return self.get(occurrence_id)

    def list_log_failures(self, limit: int = 50, offset: int = 0) -> list[Execution]:
        check_page(limit, offset)
        return self._scheduler.context().executions.list_log_failures(limit, offset)

    def repair_log(self, occurrence_id: str) -> RepairResult:
        """Project a ``pending`` journal entry into the log table (safe on any node, concurrently)."""
        execution = self.get(occurrence_id)
        if execution.log_persistence != "pending":
            return RepairResult(occurrence_id, execution.log_persistence, False)
        repaired = self._scheduler.context().logs.project(execution)
        return RepairResult(occurrence_id, self.get(occurrence_id).log_persistence, repaired)

    def repair_all(self, max_rounds: int = 100) -> RepairAllResult:
        """Drain the log failures: repair a round read at offset 0, then read offset 0 again.

        Offset 0 every round, because each repair removes its row from the list. Stops when
        nothing is left, when a round repaired nothing (what remains cannot be repaired now:
        a disagreeing log row, or someone else is draining), or after ``max_rounds`` rounds.
        A failure of one row is counted and the round goes on; such rows stay at the head of
        the list, so a hundred of them stop the drain until each is looked at.
        """
        _check_int("max_rounds", max_rounds, 1, 10_000)
        repaired = rounds = 0
        failed: set[str] = set()
        while rounds < max_rounds:
            batch = self.list_log_failures(REPAIR_ROUND, 0)
            if not batch:
                break
            rounds += 1
            done = 0
            for execution in batch:
                try:
                    done += self.repair_log(execution.occurrence_id).repaired
                except (LogPersistFailedError, ExecutionNotFoundError) as exc:
                    if execution.occurrence_id not in failed:
                        logger.warning("log repair of %s failed: %s", execution.occurrence_id, exc)
                    failed.add(execution.occurrence_id)
            repaired += done
            if done == 0:
                break
        return RepairAllResult(repaired, len(failed), self.log_failure_count(), rounds)
