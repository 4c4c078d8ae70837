"""What a delivery attempt makes of a queued message: sent, retried later, dead or unknown.

``decide`` classifies one attempt's :class:`Delivery` (its failure class, whether the request
may have gone out, whether the provider is idempotent, the attempts left); ``retry_or_dead``
is the retry budget alone, for a provider that is missing or a lease that ran out; and
``last_error`` is the masked, bounded text the dashboard shows. The rules are in
docs/semantics.md ("Notifications").
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.masking import mask_text
from scheduler_core.reach.base import Delivery
from scheduler_core.reach.config import backoff_ms
from scheduler_core.statuses import QueueStatus
from scheduler_core.store.reach_queue_pages import QueueEntry

__all__ = ["LAST_ERROR_MAX", "LEASE_LOST", "Verdict", "decide", "last_error", "retry_or_dead"]

LAST_ERROR_MAX = 300
LEASE_LOST = "the node delivering it stopped before it recorded the outcome (its lease ran out)"


@dataclass(frozen=True)
class Verdict:
    status: QueueStatus  # sent | dead | unknown | pending
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
        return Verdict(QueueStatus.SENT)
    failure = delivery.failure_class or "transient_failure"
    error = last_error(failure, delivery.error)
    if failure == "invalid_message":
        return Verdict(QueueStatus.DEAD, failure, last_error=error)
    if delivery.started and not idempotent:
        return Verdict(QueueStatus.UNKNOWN, failure, last_error=error)
    if failure == "permanent_rejection":
        return Verdict(QueueStatus.DEAD, failure, last_error=error)
    return retry_or_dead(entry, failure, error)


def retry_or_dead(entry: QueueEntry, failure: str, error: str) -> Verdict:
    """Retry after the entry's backoff, or dead once its attempts are used up."""
    if entry.attempt_count >= entry.max_attempts:
        return Verdict(QueueStatus.DEAD, "attempts_exhausted", last_error=error)
    return Verdict(QueueStatus.PENDING, failure,
                   backoff_ms(entry.retry_delay_ms, entry.max_retry_delay_ms, entry.attempt_count), error)
