"""The operator API: ``scheduler.execution.get / list_unknown / resolve_unknown /
list_log_failures / repair_log``. Repair replays the journal; it never runs business code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler_core.errors import ConfigError, ConflictError, ExecutionNotFoundError
from scheduler_core.model import Execution, ExecutionLog, LogPersistence

if TYPE_CHECKING:
    from scheduler_core.runtime.scheduler import Scheduler

RESOLUTIONS = ("success", "discarded")
EXECUTION_STATUSES = ("running", "success", "failed", "interrupted", "unknown", "discarded", "skipped")


def check_page(limit: Any, offset: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise ConfigError("limit", f"must be an integer between 1 and 100 (got {limit!r})")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 1_000_000:
        raise ConfigError("offset", f"must be an integer between 0 and 1000000 (got {offset!r})")


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


class ExecutionOperations:
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

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
