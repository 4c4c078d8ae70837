"""Delivery rounds over the durable queue, crash recovery, and the operator API.

A round runs outside the do-not-disturb window, at most once a minute per node, and handles
at most 100 rows. Its eligibility time is fixed when it starts, so a row that fails and is
rescheduled is not claimed again in the same round. Each row is claimed on its own under a
DB-clock lease; ``sending`` is committed before the provider is called, and the lease is
renewed while the provider works.

What a failed delivery becomes (``decide``):
- ``invalid_message`` -> dead at once (retrying cannot help);
- a delivery that *started* on a non-idempotent provider (SMTP, SMS, default webhooks) ->
  unknown: it may have been delivered, and only a person who checked can say;
- a permanent rejection -> dead;
- otherwise (not started, or an idempotent webhook): retry with the stored backoff, or dead
  (``attempts_exhausted``) once the stored budget is used.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from scheduler_core.errors import ReachConfigError, ReachError
from scheduler_core.reach.base import Delivery, Provider, RenderedMessage
from scheduler_core.reach.config import backoff_ms
from scheduler_core.store.reach_queue import QueuedMessage, QueueEntry, QueueRepository

logger = logging.getLogger("scheduler_core.reach.queue")
ROUND_LIMIT = 100
_COUNTER = {"sent": "sent", "pending": "retried", "dead": "dead", "unknown": "unknown"}
SEND_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class Verdict:
    status: str  # sent | dead | unknown | pending
    last_failure: str | None = None
    retry_in_ms: int | None = None


def decide(delivery: Delivery, idempotent: bool, entry: QueueEntry) -> Verdict:
    if delivery.sent:
        return Verdict("sent")
    failure = delivery.failure_class or "transient_failure"
    if failure == "invalid_message":
        return Verdict("dead", failure)
    if delivery.started and not idempotent:
        return Verdict("unknown", failure)
    if failure == "permanent_rejection":
        return Verdict("dead", failure)
    return _retry_or_dead(entry, failure)


def _retry_or_dead(entry: QueueEntry, failure: str) -> Verdict:
    if entry.attempt_count >= entry.max_attempts:
        return Verdict("dead", "attempts_exhausted")
    return Verdict("pending", failure, backoff_ms(entry.retry_delay_ms, entry.max_retry_delay_ms, entry.attempt_count))


@dataclass(frozen=True)
class RoundReport:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    dead: int = 0
    unknown: int = 0
    lost: int = 0  # leases lost mid-delivery: another node settles those
    recovered: int = 0  # expired claims of dead owners settled first


class DeliveryRounds:
    def __init__(self, repo: QueueRepository, providers: Callable[[], dict[str, Provider]]) -> None:
        self.repo = repo
        self.providers = providers

    def run(self) -> RoundReport:
        recovered = self.recover_expired()
        eligible_at = self.repo.now()  # fixed for the round
        counts = {"claimed": 0, "sent": 0, "retried": 0, "dead": 0, "unknown": 0, "lost": 0}
        for _ in range(ROUND_LIMIT):
            token = str(uuid.uuid4())
            message = self.repo.claim_next(eligible_at, token)
            if message is None:
                break
            counts["claimed"] += 1
            outcome = self._deliver(message, token)
            counts[_COUNTER.get(outcome, "lost")] += 1
        return RoundReport(recovered=recovered, **counts)

    def _deliver(self, message: QueuedMessage, token: str) -> str:
        entry = message.entry
        provider = self.providers().get(entry.provider)
        if provider is None:
            verdict = _retry_or_dead(entry, "provider_unavailable")
            applied = self.repo.settle(entry.queue_id, token, verdict.status, last_failure=verdict.last_failure,
                                       retry_in_ms=verdict.retry_in_ms)
            return verdict.status if applied else "lost"
        if not self.repo.mark_sending(entry.queue_id, token):
            return "lost"
        delivery = self._send_keeping_lease(provider, message, token)
        verdict = decide(delivery, provider.idempotent, entry)
        applied = self.repo.settle(entry.queue_id, token, verdict.status, message_id=delivery.message_id,
                                   last_failure=verdict.last_failure, retry_in_ms=verdict.retry_in_ms)
        if not applied:
            logger.warning("queue %s: lease lost while sending; the recovery of another node settles it",
                           entry.queue_id)
        return verdict.status if applied else "lost"

    def _send_keeping_lease(self, provider: Provider, message: QueuedMessage, token: str) -> Delivery:
        done = threading.Event()
        interval = max(self.repo.lease_ms / 3000, 0.2)

        def keep_alive() -> None:
            while not done.wait(interval):
                try:
                    if not self.repo.renew(message.entry.queue_id, token):
                        return
                except Exception:
                    logger.warning("queue %s: lease renewal failed", message.entry.queue_id, exc_info=True)

        renewer = threading.Thread(target=keep_alive, name="hai-reach-renew", daemon=True)
        renewer.start()
        try:
            key = message.entry.queue_id if provider.idempotent else None
            rendered = RenderedMessage(message.recipient, message.subject, message.body, message.extra)
            return provider.send(rendered, key, SEND_TIMEOUT_MS)
        except Exception as exc:  # a provider bug: the request may have gone out
            return Delivery(sent=False, failure_class="transient_failure", started=True,
                            error=f"provider error: {type(exc).__name__}")
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
            if message.entry.status == "sending" and not idempotent:
                verdict = Verdict("unknown", "transient_failure")
            else:
                verdict = _retry_or_dead(message.entry, "transient_failure")
            settled += self.repo.recover(message, verdict.status, verdict.last_failure, verdict.retry_in_ms)
        return settled


QUEUE_STATUSES = ("pending", "processing", "sending", "sent", "unknown", "dead", "discarded")


class QueueOperations:
    """``reach.queue``: safe metadata and the two operator decisions."""

    def __init__(self, repo: Callable[[], QueueRepository]) -> None:
        self._repo = repo

    def get(self, queue_id: str) -> QueueEntry | None:
        return self._repo().get(_queue_id(queue_id))

    def counts(self) -> dict[str, int]:
        """Messages per status (every status present, zero when none)."""
        found = self._repo().count_by_status()
        return {status: found.get(status, 0) for status in QUEUE_STATUSES}

    def list(self, status: str, limit: int = 50, offset: int = 0) -> list[QueueEntry]:
        if status not in ("dead", "unknown"):
            raise ReachConfigError("status", f"must be dead or unknown (got {status!r})")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            raise ReachConfigError("limit", f"must be an integer between 1 and 100 (got {limit!r})")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 1_000_000:
            raise ReachConfigError("offset", f"must be an integer between 0 and 1000000 (got {offset!r})")
        return self._repo().list(status, limit, offset)

    def requeue_dead(self, queue_id: str, expected_updated_at: int) -> QueueEntry:
        """Only from dead, only at the current version; resets attempts, keeps id and policy."""
        if isinstance(expected_updated_at, bool) or not isinstance(expected_updated_at, int):
            raise ReachConfigError("expected_updated_at", "must be the entry's updated_at (unix ms)")
        entry = self._existing(queue_id)
        if entry.status != "dead":
            raise ReachError(f"queue entry {queue_id} is {entry.status}; only dead entries can be requeued "
                             "(unknown ones need resolve_unknown)", queue_id=queue_id)
        if not self._repo().requeue_dead(queue_id, expected_updated_at):
            raise ReachError(f"queue entry {queue_id} changed since it was read; read it again",
                             queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def resolve_unknown(self, queue_id: str, status: str, message_id: str | None = None,
                        resolved_by: str | None = None) -> QueueEntry:
        if status not in ("sent", "discarded"):
            raise ReachConfigError("status", f"must be sent or discarded (got {status!r})")
        if message_id is not None and (not isinstance(message_id, str) or not 1 <= len(message_id) <= 255):
            raise ReachConfigError("message_id", "must be 1..255 characters")
        entry = self._existing(queue_id)
        if entry.status != "unknown" or not self._repo().resolve_unknown(queue_id, status, message_id, resolved_by):
            raise ReachError(f"queue entry {queue_id} is not unknown (any more)", queue_id=queue_id, conflict=True)
        return self._existing(queue_id)

    def _existing(self, queue_id: str) -> QueueEntry:
        entry = self._repo().get(_queue_id(queue_id))
        if entry is None:
            raise ReachError(f"queue entry {queue_id} not found", queue_id=queue_id)
        return entry


def _queue_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise ReachConfigError("queue_id", f"must be a queue receipt UUID (got {value!r})") from None
