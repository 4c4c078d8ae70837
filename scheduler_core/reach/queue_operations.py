"""The operator's queue API (``reach.queue``): a message's metadata, the dashboard's lists, decisions.

:class:`QueueOperations` reads one entry, counts per status, pages through a status with
filters (and when do-not-disturb holds a pending message), requeues dead letters one at a
time or as a previewed bulk set, and resolves unknown deliveries. Every decision is a
compare-and-set on the version the operator read; every argument is checked first and
refused with :class:`ReachConfigError`. Each read and decision takes the caller's ``Scope``
(default: every team): a row of a team outside it is one that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.reach.base import FailureClass
from scheduler_core.reach.config import DndConfig
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.statuses import DeliveryResolution, QueueStatus
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.store.reach_queue_pages import DeadSet, QueueEntry, QueueFilter
from scheduler_core.validation import (
    ID_MAX,
    PAGE_LIMIT,
    check_choice,
    check_int,
    check_ms,
    check_optional_text,
    check_page,
    shown,
)

__all__ = [
    "BULK_BATCH",
    "BULK_MAX",
    "FAILURE_CLASSES",
    "QUEUE_STATUSES",
    "SETTLE_GRACE_MS",
    "BulkPreview",
    "BulkResult",
    "QueueEntry",
    "QueueOperations",
    "QueuePage",
    "QueueRow",
    "held_until",
]

QUEUE_STATUSES = tuple(QueueStatus)
FAILURE_CLASSES: tuple[str, ...] = get_args(FailureClass)
BULK_MAX = 10_000  # dead letters one bulk requeue takes at most (the oldest of a larger set)
BULK_BATCH = 100  # rows per compare-and-set transaction of a bulk requeue
SETTLE_GRACE_MS = 1_000  # a bulk set ends this long before the preview's DB time (see preview_bulk_requeue)


@dataclass(frozen=True)
class QueueRow:
    """One row of a dashboard list."""

    entry: QueueEntry
    held_until: int | None  # pending and held by do-not-disturb: when the window lets it go (unix ms)


@dataclass(frozen=True)
class QueuePage:
    rows: list[QueueRow]
    next_after: str | None  # cursor of the next (older) page; None on the last one
    now_ms: int  # the DB time the page was read at


@dataclass(frozen=True)
class BulkPreview:
    """A captured bulk-requeue set: the filter, a bound on (updated_at, queue_id), its count."""

    provider: str | None
    failure: str | None
    template: str | None
    bound_at: int  # rows changed at or before this DB time (unix ms) ...
    bound_id: str | None  # ... and, at exactly bound_at, with a queue id <= this one (None: any)
    count: int  # how many dead letters were in the set when it was previewed
    more: bool = False  # more dead letters matched than one bulk requeue takes (BULK_MAX)


@dataclass(frozen=True)
class BulkResult:
    previewed: int
    requeued: int
    changed: int  # previewed rows that were no longer dead at their previewed version


def held_until(entry: QueueEntry, now_ms: int, dnd: DndConfig | None) -> int | None:
    """When a pending message is waiting for the do-not-disturb window: the instant it may go.

    Two cases: its next attempt falls inside the window (rounds do not run there, so it waits
    for the window's end), or it was deferred by ``send`` inside the window (never attempted,
    no failure, due in the future: only a DND delay enqueues a message for later)."""
    if entry.status != QueueStatus.PENDING:
        return None
    due = max(entry.next_attempt_at, now_ms)
    if dnd is not None and in_window(dnd, due):
        return window_end_ms(dnd, due)
    if entry.attempt_count == 0 and entry.last_failure is None and entry.next_attempt_at > now_ms:
        return entry.next_attempt_at
    return None


class QueueOperations:
    """``reach.queue``: safe metadata, the operator decisions, and the dashboard's lists."""

    def __init__(self, repo: Callable[[], QueueRepository], dnd: Callable[[], DndConfig] | None = None) -> None:
        self._repo = repo
        self._dnd = dnd

    def get(self, queue_id: str, scope: Scope = EVERY_TEAM) -> QueueEntry | None:
        return self._repo().get(_queue_id(queue_id), scope)

    def counts(self, cap: int | None = None, scope: Scope = EVERY_TEAM) -> dict[str, int]:
        """Messages per status (every status present, zero when none). With ``cap`` each status
        is counted up to ``cap + 1`` only (a bounded scan; more than ``cap`` shows as ``cap + 1``)."""
        if cap is None:
            found = self._repo().count_by_status(scope)
        else:
            found = self._repo().count_by_status_capped(QUEUE_STATUSES, _int(cap, "cap", 1, 1_000_000), scope)
        return {status: found.get(status, 0) for status in QUEUE_STATUSES}

    def list(self, status: str, limit: int = 50, offset: int = 0, scope: Scope = EVERY_TEAM) -> list[QueueEntry]:
        listed = check_choice(status, "status", QueueStatus, ReachConfigError)
        if listed not in (QueueStatus.DEAD, QueueStatus.UNKNOWN):
            raise ReachConfigError("status", f"must be dead or unknown (got {status!r})")
        check_page(limit, offset, ReachConfigError)
        return self._repo().list(listed, limit, offset, scope)

    def browse(self, status: str, *, provider: str | None = None, failure: str | None = None,
               template: str | None = None, limit: int = 50, after: str | None = None,
               scope: Scope = EVERY_TEAM) -> QueuePage:
        """One page of the messages in ``status`` (optionally of one provider, failure class,
        template), newest change first; ``after`` is the previous page's ``next_after``."""
        where = _filter(status, provider, failure, template, scope)
        _int(limit, "limit", 1, PAGE_LIMIT)
        repo = self._repo()
        now_ms = repo.now()
        entries = repo.browse(where, limit + 1, _cursor(after))
        dnd = self._dnd() if self._dnd is not None else None
        rows = [QueueRow(entry, held_until(entry, now_ms, dnd)) for entry in entries[:limit]]
        last = entries[limit - 1] if len(entries) > limit else None
        return QueuePage(rows, None if last is None else f"{last.updated_at}.{last.queue_id}", now_ms)

    def held_until(self, entry: QueueEntry, now_ms: int) -> int | None:
        return held_until(entry, now_ms, self._dnd() if self._dnd is not None else None)

    def preview_bulk_requeue(self, provider: str | None = None, failure: str | None = None,
                             template: str | None = None, scope: Scope = EVERY_TEAM) -> BulkPreview:
        """Capture the dead letters matching the filter for :meth:`bulk_requeue`: those changed at
        or before ``now - SETTLE_GRACE_MS`` (DB time), at most the oldest ``BULK_MAX``, and count them.

        The grace keeps out a row whose dead write evaluated its DB time just before the preview
        but committed just after it (invisible to the count, yet below the bound): every queue
        write is one short transaction, committed well within the grace."""
        where = _filter(QueueStatus.DEAD, provider, failure, template, scope)
        repo = self._repo()
        captured = repo.capture_dead(where, repo.now() - SETTLE_GRACE_MS, BULK_MAX)
        return BulkPreview(provider, failure, template, captured.bound_at, captured.bound_id, captured.count,
                           captured.more)

    def bulk_requeue(self, preview: BulkPreview, scope: Scope = EVERY_TEAM) -> BulkResult:
        """Requeue exactly the previewed set: each row still inside the preview's bound is requeued
        by a compare-and-set on the version just read, in batches of ``BULK_BATCH`` (one short
        transaction each). A row that died after the preview is above the bound (its updated_at
        is later); a previewed row that changed since has left the bound or fails its CAS. Never
        more than the previewed count is requeued. Only rows in ``scope`` (the caller's teams) are."""
        where, bound = _checked_preview(preview, scope)
        repo = self._repo()
        requeued, after = 0, None
        while requeued < bound.count:
            versions = repo.dead_versions(where, bound, after, BULK_BATCH)[: bound.count - requeued]
            if not versions:
                break
            requeued += repo.requeue_dead_versions(versions)
            after = (versions[-1][1], versions[-1][0])
        return BulkResult(bound.count, requeued, bound.count - requeued)

    def requeue_dead(self, queue_id: str, expected_updated_at: int, scope: Scope = EVERY_TEAM) -> QueueEntry:
        """Only from dead, only at the current version; resets attempts, keeps id and policy."""
        queue_id = _queue_id(queue_id)
        check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        entry = self._existing(queue_id, scope)
        if entry.status != QueueStatus.DEAD:
            raise ReachError(f"queue entry {queue_id} is {entry.status}; only dead entries can be requeued "
                             "(unknown ones need resolve_unknown)", queue_id=queue_id)
        if not self._repo().requeue_dead(queue_id, expected_updated_at, scope):
            raise ReachError(f"queue entry {queue_id} changed since it was read; read it again",
                             queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def resolve_unknown(self, queue_id: str, status: str, message_id: str | None = None,
                        resolved_by: str | None = None, expected_updated_at: int | None = None,
                        scope: Scope = EVERY_TEAM) -> QueueEntry:
        """unknown -> sent | discarded; with ``expected_updated_at``, only at that version."""
        queue_id = _queue_id(queue_id)
        verdict = check_choice(status, "status", DeliveryResolution, ReachConfigError)
        check_optional_text(message_id, "message_id", 255, ReachConfigError, single_line=True)
        check_optional_text(resolved_by, "resolved_by", ID_MAX, ReachConfigError, single_line=True)
        if expected_updated_at is not None:
            check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        entry = self._existing(queue_id, scope)
        if entry.status != QueueStatus.UNKNOWN or not self._repo().resolve_unknown(
                queue_id, verdict, message_id, resolved_by, expected_updated_at, scope):
            raise ReachError(f"queue entry {queue_id} is not unknown at the version read (any more)",
                             queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def _existing(self, queue_id: str, scope: Scope = EVERY_TEAM) -> QueueEntry:
        entry = self._repo().get(_queue_id(queue_id), scope)
        if entry is None:
            raise ReachError(f"queue entry {queue_id} not found", queue_id=queue_id, not_found=True)
        return entry


def _queue_id(value: Any, field: str = "queue_id") -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise ReachConfigError(field, f"must be a queue receipt UUID (got {shown(value)})") from None


def _int(value: Any, field: str, low: int, high: int) -> int:
    return check_int(value, field, low, high, ReachConfigError)


def _filter(status: Any, provider: Any, failure: Any, template: Any, scope: Scope = EVERY_TEAM) -> QueueFilter:
    listed = check_choice(status, "status", QueueStatus, ReachConfigError)
    if failure is not None and (not isinstance(failure, str) or failure not in FAILURE_CLASSES):
        raise ReachConfigError("failure", f"must be one of {', '.join(FAILURE_CLASSES)} (got {shown(failure)})")
    return QueueFilter(listed, check_optional_text(provider, "provider", 64, ReachConfigError, single_line=True),
                       failure, check_optional_text(template, "template", ID_MAX, ReachConfigError), scope)


def _cursor(value: Any) -> tuple[int, str] | None:
    """``after``: "<updated_at>.<queue_id>" of the last row of the previous page."""
    if value is None:
        return None
    at, _, queue_id = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not at.isascii() or not at.isdigit() or len(at) > 16:  # "²" is a digit to isdigit, not to int
        raise ReachConfigError("after", f"must be a page cursor <updated_at>.<queue_id> (got {shown(value)})")
    return int(at), _queue_id(queue_id, "after")


def _checked_preview(preview: BulkPreview, scope: Scope) -> tuple[QueueFilter, DeadSet]:
    if not isinstance(preview, BulkPreview):
        raise ReachConfigError("preview", "must be the BulkPreview returned by preview_bulk_requeue")
    where = _filter(QueueStatus.DEAD, preview.provider, preview.failure, preview.template, scope)
    bound_at = check_ms(preview.bound_at, "bound_at", ReachConfigError)
    bound_id = None if preview.bound_id is None else _queue_id(preview.bound_id, "bound_id")
    return where, DeadSet(bound_at, bound_id, _int(preview.count, "count", 0, BULK_MAX))
