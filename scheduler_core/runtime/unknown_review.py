"""The unknown review in bulk: ``scheduler.execution.unknown`` (a filtered list),
``preview_bulk_resolve`` (capture the set and count it) and ``bulk_resolve`` (settle exactly that
set, each row by a compare-and-set on its version, each in its own short transaction).

The same shape as the dead-letter bulk requeue (docs/semantics.md, C5): a row that becomes
unknown after the preview changed later than the bound and is left out; a previewed row someone
resolved meanwhile is no longer unknown and is counted as changed. Never more than the previewed
count is resolved."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.errors import ConfigError
from scheduler_core.model import Execution
from scheduler_core.statuses import Resolution
from scheduler_core.store.executions import ExecutionRepository
from scheduler_core.store.unknown_review import UnknownFilter, UnknownReviewQueries, UnknownSet
from scheduler_core.validation import (
    ID_MAX,
    PAGE_LIMIT,
    check_choice,
    check_int,
    check_ms,
    check_optional_id,
    check_optional_text,
    check_text,
)

BULK_MAX = 1_000  # unknown executions one bulk resolution takes at most (the oldest of a larger set)
BATCH = 100  # rows read per round of a bulk resolution
SETTLE_GRACE_MS = 1_000  # the set ends this long before the preview's DB time (a commit in flight)
REASON_MAX = 2_000


@dataclass(frozen=True)
class BulkResolvePreview:
    """A captured set of unknown executions: the filter, a bound on (updated_at, occurrence_id), its count."""

    task_id: str | None
    reason: str | None  # the executions' reason (lease_expired, ...), not the operator's
    bound_at: int  # rows changed at or before this DB time (unix ms) ...
    bound_id: str | None  # ... and, at exactly bound_at, with an occurrence id <= this one (None: any)
    count: int  # how many unknown executions were in the set when it was previewed
    more: bool = False  # more matched than one bulk resolution takes (BULK_MAX)


@dataclass(frozen=True)
class BulkResolveResult:
    previewed: int
    resolved: int
    changed: int  # previewed rows no longer unknown at their version (resolved meanwhile)
    resolved_ids: tuple[str, ...]


def check_filter(task_id: Any, reason: Any, scope: Scope = EVERY_TEAM) -> UnknownFilter:
    return UnknownFilter(check_optional_id(task_id, "task"), check_optional_text(reason, "cause", 64,
                                                                               single_line=True), scope)


class UnknownReview:
    def __init__(self, queries: Callable[[], UnknownReviewQueries], repo: Callable[[], ExecutionRepository],
                 now_ms: Callable[[], int]) -> None:
        self._queries = queries
        self._repo = repo
        self._now_ms = now_ms

    def unknown(self, task_id: str | None = None, reason: str | None = None, limit: int = 100,
                scope: Scope = EVERY_TEAM) -> list[Execution]:
        """Unknown executions of the filter (in ``scope``'s teams), the longest-waiting first."""
        where = check_filter(task_id, reason, scope)
        check_int(limit, "limit", 1, PAGE_LIMIT)
        return self._queries().oldest(where, limit)

    def preview_bulk_resolve(self, task_id: str | None = None, reason: str | None = None,
                             scope: Scope = EVERY_TEAM) -> BulkResolvePreview:
        """Capture the unknown executions of the filter (in ``scope``'s teams) changed at or before
        ``now - SETTLE_GRACE_MS`` (DB time), at most the oldest ``BULK_MAX``, and count them."""
        where = check_filter(task_id, reason, scope)
        found = self._queries().capture(where, self._now_ms() - SETTLE_GRACE_MS, BULK_MAX)
        return BulkResolvePreview(where.task_id, where.reason, found.bound_at, found.bound_id, found.count, found.more)

    def bulk_resolve(self, preview: BulkResolvePreview, status: str, resolved_by: str | None,
                     reason: str, scope: Scope = EVERY_TEAM) -> BulkResolveResult:
        """Resolve exactly the previewed set as ``status`` (success | discarded) with the operator's
        ``reason``, only rows of ``scope``'s teams; each row by a compare-and-set on the version just
        read, releasing its slot."""
        where, bound = _checked(preview)
        where = replace(where, scope=scope)
        check_choice(status, "status", Resolution)
        check_optional_text(resolved_by, "resolved_by", ID_MAX, single_line=True)
        check_text(reason, "reason", REASON_MAX)
        if not reason.strip():
            raise ConfigError("reason", "must say why (what was checked)")
        repo, after = self._repo(), None
        done: list[str] = []
        while len(done) < bound.count:
            batch = self._queries().inside(where, bound, after, BATCH)
            if not batch:
                break
            for execution in batch[: bound.count - len(done)]:
                if repo.resolve_unknown(execution, status, execution.updated_at, resolved_by, reason):
                    done.append(execution.occurrence_id)
            after = (batch[-1].updated_at, batch[-1].occurrence_id)
        return BulkResolveResult(bound.count, len(done), bound.count - len(done), tuple(done))


def _checked(preview: Any) -> tuple[UnknownFilter, UnknownSet]:
    if not isinstance(preview, BulkResolvePreview):
        raise ConfigError("preview", "must be the BulkResolvePreview returned by preview_bulk_resolve")
    where = check_filter(preview.task_id, preview.reason)
    bound_at = check_ms(preview.bound_at, "bound_at")
    bound_id = check_optional_id(preview.bound_id, "bound_id")
    return where, UnknownSet(bound_at, bound_id, check_int(preview.count, "count", 0, BULK_MAX))
