"""Delivery rounds over the durable queue, crash recovery, and the operator API.

Rounds, leases, senders and what a failed delivery becomes (``decide``): docs/semantics.md
("Notifications")."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, get_args

from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.masking import mask_text
from scheduler_core.reach.base import Delivery, FailureClass, Provider, RenderedMessage
from scheduler_core.reach.config import DndConfig, backoff_ms
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.statuses import DeliveryResolution, QueueStatus
from scheduler_core.store.reach_queue import QueuedMessage, QueueRepository, Settlement
from scheduler_core.store.reach_queue_pages import DeadSet, QueueEntry, QueueFilter
from scheduler_core.store.transactions import HeldConnection
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

logger = logging.getLogger("scheduler_core.reach.queue")
ROUND_LIMIT = 100
_COUNTER = {"sent": "sent", "pending": "retried", "dead": "dead", "unknown": "unknown"}
SEND_TIMEOUT_MS = 30_000
SKIPPED_RETRIES = 5  # empty claims a round retries while due rows are locked by others
_pause = threading.Event().wait  # a relative wait that also behaves under libfaketime


LAST_ERROR_MAX = 300
LEASE_LOST = "the node delivering it stopped before it recorded the outcome (its lease ran out)"


@dataclass(frozen=True)
class Verdict:
    status: str  # sent | dead | unknown | pending
    last_failure: str | None = None  # the class the queue acts and filters on
    retry_in_ms: int | None = None
    last_error: str | None = None  # what went wrong: "<real class>: <short masked message>"


def last_error(failure: str, error: str | None) -> str:
    """The real last failure, fit for display: its class and the provider's short message with
    URL passwords, credentials and secret assignments masked, at most LAST_ERROR_MAX characters.
    A letter whose attempts ran out keeps the class of its last attempt here."""
    text = f"{failure}: {mask_text(error.strip())}" if error and error.strip() else failure
    return text if len(text) <= LAST_ERROR_MAX else text[: LAST_ERROR_MAX - 1] + "…"


def decide(delivery: Delivery, idempotent: bool, entry: QueueEntry) -> Verdict:
    if delivery.sent:
        return Verdict("sent")
    failure = delivery.failure_class or "transient_failure"
    error = last_error(failure, delivery.error)
    if failure == "invalid_message":
        return Verdict("dead", failure, last_error=error)
    if delivery.started and not idempotent:
        return Verdict("unknown", failure, last_error=error)
    if failure == "permanent_rejection":
        return Verdict("dead", failure, last_error=error)
    return _retry_or_dead(entry, failure, error)


def _retry_or_dead(entry: QueueEntry, failure: str, error: str) -> Verdict:
    if entry.attempt_count >= entry.max_attempts:
        return Verdict("dead", "attempts_exhausted", last_error=error)
    return Verdict("pending", failure, backoff_ms(entry.retry_delay_ms, entry.max_retry_delay_ms, entry.attempt_count),
                   error)


@dataclass(frozen=True)
class RoundReport:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    dead: int = 0
    unknown: int = 0
    lost: int = 0  # not settled by this round (lease lost, or a database error): recovery settles those
    recovered: int = 0  # expired claims of dead owners settled first


class DeliveryRounds:
    def __init__(self, repo: QueueRepository, providers: Callable[[], dict[str, Provider]],
                 concurrency: int = 1) -> None:
        self.repo = repo
        self.providers = providers
        self.concurrency = concurrency

    def run(self, urgent_only: bool = False) -> RoundReport:
        """One round: waves of up to ``concurrency`` rows until ``ROUND_LIMIT`` are claimed or
        nothing is due. Each wave is one claim, one mark-sending, the sends at once, one settle
        (docs/semantics.md, "Notifications"). ``urgent_only`` (do-not-disturb): only messages
        marked urgent are claimed."""
        recovered = self.recover_expired()
        eligible_at = self.repo.now()  # fixed for the round
        counts = {"claimed": 0, "sent": 0, "retried": 0, "dead": 0, "unknown": 0, "lost": 0}
        held = HeldConnection(self.repo.engine)  # the round's writes: no pool check-out and pre-ping each
        try:
            self._waves(eligible_at, urgent_only, counts, held)
        finally:
            held.drop()
        return RoundReport(recovered=recovered, **counts)

    def _waves(self, eligible_at: int, urgent_only: bool, counts: dict[str, int], held: HeldConnection) -> None:
        skipped = 0
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="hai-reach-send") as senders:
            while counts["claimed"] < ROUND_LIMIT:
                token = str(uuid.uuid4())
                wave = self.repo.claim_due(eligible_at, token, min(self.concurrency, ROUND_LIMIT - counts["claimed"]),
                                           urgent_only, held.get())  # a failure ends the round (run drops held)
                if not wave:
                    # due rows another transaction held locked were skipped: look again shortly
                    # rather than end the round (and wait a minute) while they may be left to us
                    if skipped < SKIPPED_RETRIES and self.repo.any_due(eligible_at, urgent_only):
                        skipped += 1
                        _pause(0.02 * skipped)
                        continue
                    break
                counts["claimed"] += len(wave)
                try:
                    outcomes = self._deliver_wave(wave, token, senders, held)
                except Exception:  # a database failure mid-wave: the leases run out and recovery
                    # settles the rows (retry before sending; unknown or retry after)
                    logger.warning("queue wave of %d: delivery failed; recovery settles it", len(wave), exc_info=True)
                    held.drop()  # the next wave takes a fresh connection
                    outcomes = ["lost"] * len(wave)
                for outcome in outcomes:
                    counts[_COUNTER.get(outcome, "lost")] += 1

    def _deliver_wave(self, wave: list[QueuedMessage], token: str, senders: ThreadPoolExecutor,
                      held: HeldConnection) -> list[str]:
        """Send a claimed wave and settle it in one transaction; one outcome per row."""
        providers = self.providers()
        verdicts: dict[str, tuple[Verdict, str | None]] = {}
        sendable = []
        for message in wave:
            if message.entry.provider in providers:
                sendable.append(message)
            else:
                unavailable = last_error("provider_unavailable", f"no provider named {message.entry.provider!r}")
                verdicts[message.entry.queue_id] = (
                    _retry_or_dead(message.entry, "provider_unavailable", unavailable), None)
        if sendable:
            marked = self.repo.mark_sending_many([m.entry.queue_id for m in sendable], token, held.get())
            sendable = [m for m in sendable if m.entry.queue_id in marked]  # the others were lost: not sent
        if sendable:
            for message, delivery in zip(sendable, self._send_keeping_lease(providers, sendable, token, senders),
                                         strict=True):
                provider = providers[message.entry.provider]
                verdicts[message.entry.queue_id] = (decide(delivery, provider.idempotent, message.entry),
                                                    delivery.message_id)
        applied = self.repo.settle_many(token, [
            Settlement(queue_id, verdict.status, message_id, verdict.last_failure, verdict.retry_in_ms,
                       verdict.last_error)
            for queue_id, (verdict, message_id) in verdicts.items()], held.get()) if verdicts else set()
        if len(applied) < len(verdicts):
            logger.warning("queue: %d of a wave's leases lost while sending; recovery settles them",
                           len(verdicts) - len(applied))
        return [verdicts[m.entry.queue_id][0].status if m.entry.queue_id in applied else "lost" for m in wave]

    def _send_keeping_lease(self, providers: dict[str, Provider], wave: list[QueuedMessage], token: str,
                            senders: ThreadPoolExecutor) -> list[Delivery]:
        """Send every message of the wave at once, renewing the wave's leases meanwhile."""
        done = threading.Event()
        interval = max(self.repo.lease_ms / 3000, 0.2)

        def keep_alive() -> None:
            while not done.wait(interval):
                try:
                    if not self.repo.renew_claim(token):
                        return
                except Exception:
                    logger.warning("queue: lease renewal failed", exc_info=True)

        renewer = threading.Thread(target=keep_alive, name="hai-reach-renew", daemon=True)
        renewer.start()
        try:
            sends = [senders.submit(_send, providers[m.entry.provider], m) for m in wave]
            return [sent.result() for sent in sends]
        finally:
            done.set()
            renewer.join()

    def recover_expired(self) -> int:
        """Settle claims whose owner vanished: not yet sending -> retry (or dead when the
        budget is used); sending -> retry only for idempotent providers, else unknown."""
        settled = 0
        for message in self.repo.expired():
            provider = self.providers().get(message.entry.provider)
            idempotent = provider is not None and provider.idempotent
            error = last_error("transient_failure", LEASE_LOST)
            if message.entry.status == "sending" and not idempotent:
                verdict = Verdict("unknown", "transient_failure", last_error=error)
            else:
                verdict = _retry_or_dead(message.entry, "transient_failure", error)
            settled += self.repo.recover(message, verdict.status, verdict.last_failure, verdict.retry_in_ms,
                                         verdict.last_error)
        return settled


def _send(provider: Provider, message: QueuedMessage) -> Delivery:
    try:
        key = message.entry.queue_id if provider.idempotent else None
        rendered = RenderedMessage(message.recipient, message.subject, message.body, message.extra)
        return provider.send(rendered, key, SEND_TIMEOUT_MS)
    except Exception as exc:  # a provider bug: the request may have gone out
        return Delivery(sent=False, failure_class="transient_failure", started=True,
                        error=f"provider error: {type(exc).__name__}")


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
    if entry.status != "pending":
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

    def get(self, queue_id: str) -> QueueEntry | None:
        return self._repo().get(_queue_id(queue_id))

    def counts(self, cap: int | None = None) -> dict[str, int]:
        """Messages per status (every status present, zero when none). With ``cap`` each status
        is counted up to ``cap + 1`` only (a bounded scan; more than ``cap`` shows as ``cap + 1``)."""
        if cap is None:
            found = self._repo().count_by_status()
        else:
            found = self._repo().count_by_status_capped(QUEUE_STATUSES, _int(cap, "cap", 1, 1_000_000))
        return {status: found.get(status, 0) for status in QUEUE_STATUSES}

    def list(self, status: str, limit: int = 50, offset: int = 0) -> list[QueueEntry]:
        if check_choice(status, "status", QueueStatus, ReachConfigError) not in (QueueStatus.DEAD,
                                                                                  QueueStatus.UNKNOWN):
            raise ReachConfigError("status", f"must be dead or unknown (got {status!r})")
        check_page(limit, offset, ReachConfigError)
        return self._repo().list(status, limit, offset)

    def browse(self, status: str, *, provider: str | None = None, failure: str | None = None,
               template: str | None = None, limit: int = 50, after: str | None = None) -> QueuePage:
        """One page of the messages in ``status`` (optionally of one provider, failure class,
        template), newest change first; ``after`` is the previous page's ``next_after``."""
        where = _filter(status, provider, failure, template)
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
                             template: str | None = None) -> BulkPreview:
        """Capture the dead letters matching the filter for :meth:`bulk_requeue`: those changed at
        or before ``now - SETTLE_GRACE_MS`` (DB time), at most the oldest ``BULK_MAX``, and count them.

        The grace keeps out a row whose dead write evaluated its DB time just before the preview
        but committed just after it (invisible to the count, yet below the bound): every queue
        write is one short transaction, committed well within the grace."""
        where = _filter("dead", provider, failure, template)
        repo = self._repo()
        captured = repo.capture_dead(where, repo.now() - SETTLE_GRACE_MS, BULK_MAX)
        return BulkPreview(provider, failure, template, captured.bound_at, captured.bound_id, captured.count,
                           captured.more)

    def bulk_requeue(self, preview: BulkPreview) -> BulkResult:
        """Requeue exactly the previewed set: each row still inside the preview's bound is requeued
        by a compare-and-set on the version just read, in batches of ``BULK_BATCH`` (one short
        transaction each). A row that died after the preview is above the bound (its updated_at
        is later); a previewed row that changed since has left the bound or fails its CAS. Never
        more than the previewed count is requeued."""
        where, bound = _checked_preview(preview)
        repo = self._repo()
        requeued, after = 0, None
        while requeued < bound.count:
            versions = repo.dead_versions(where, bound, after, BULK_BATCH)[: bound.count - requeued]
            if not versions:
                break
            requeued += repo.requeue_dead_versions(versions)
            after = (versions[-1][1], versions[-1][0])
        return BulkResult(bound.count, requeued, bound.count - requeued)

    def requeue_dead(self, queue_id: str, expected_updated_at: int) -> QueueEntry:
        """Only from dead, only at the current version; resets attempts, keeps id and policy."""
        queue_id = _queue_id(queue_id)
        check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        entry = self._existing(queue_id)
        if entry.status != "dead":
            raise ReachError(f"queue entry {queue_id} is {entry.status}; only dead entries can be requeued "
                             "(unknown ones need resolve_unknown)", queue_id=queue_id)
        if not self._repo().requeue_dead(queue_id, expected_updated_at):
            raise ReachError(f"queue entry {queue_id} changed since it was read; read it again",
                             queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def resolve_unknown(self, queue_id: str, status: str, message_id: str | None = None,
                        resolved_by: str | None = None, expected_updated_at: int | None = None) -> QueueEntry:
        """unknown -> sent | discarded; with ``expected_updated_at``, only at that version."""
        queue_id = _queue_id(queue_id)
        check_choice(status, "status", DeliveryResolution, ReachConfigError)
        check_optional_text(message_id, "message_id", 255, ReachConfigError, single_line=True)
        check_optional_text(resolved_by, "resolved_by", ID_MAX, ReachConfigError, single_line=True)
        if expected_updated_at is not None:
            check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        entry = self._existing(queue_id)
        if entry.status != "unknown" or not self._repo().resolve_unknown(queue_id, status, message_id, resolved_by,
                                                                         expected_updated_at):
            raise ReachError(f"queue entry {queue_id} is not unknown at the version read (any more)",
                             queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def _existing(self, queue_id: str) -> QueueEntry:
        entry = self._repo().get(_queue_id(queue_id))
        if entry is None:
            raise ReachError(f"queue entry {queue_id} not found", queue_id=queue_id)
        return entry


def _queue_id(value: Any, field: str = "queue_id") -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise ReachConfigError(field, f"must be a queue receipt UUID (got {shown(value)})") from None


def _int(value: Any, field: str, low: int, high: int) -> int:
    return check_int(value, field, low, high, ReachConfigError)


def _filter(status: Any, provider: Any, failure: Any, template: Any) -> QueueFilter:
    check_choice(status, "status", QueueStatus, ReachConfigError)
    if failure is not None and (not isinstance(failure, str) or failure not in FAILURE_CLASSES):
        raise ReachConfigError("failure", f"must be one of {', '.join(FAILURE_CLASSES)} (got {shown(failure)})")
    return QueueFilter(status, check_optional_text(provider, "provider", 64, ReachConfigError, single_line=True),
                       failure, check_optional_text(template, "template", ID_MAX, ReachConfigError))


def _cursor(value: Any) -> tuple[int, str] | None:
    """``after``: "<updated_at>.<queue_id>" of the last row of the previous page."""
    if value is None:
        return None
    at, _, queue_id = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not at.isascii() or not at.isdigit() or len(at) > 16:  # "²" is a digit to isdigit, not to int
        raise ReachConfigError("after", f"must be a page cursor <updated_at>.<queue_id> (got {shown(value)})")
    return int(at), _queue_id(queue_id, "after")


def _checked_preview(preview: BulkPreview) -> tuple[QueueFilter, DeadSet]:
    if not isinstance(preview, BulkPreview):
        raise ReachConfigError("preview", "must be the BulkPreview returned by preview_bulk_requeue")
    where = _filter("dead", preview.provider, preview.failure, preview.template)
    bound_at = check_ms(preview.bound_at, "bound_at", ReachConfigError)
    bound_id = None if preview.bound_id is None else _queue_id(preview.bound_id, "bound_id")
    return where, DeadSet(bound_at, bound_id, _int(preview.count, "count", 0, BULK_MAX))
