"""Delivery rounds over the durable queue and crash recovery; the queue's names in one place.

Rounds, leases, senders and what a failed delivery becomes (``decide``): docs/semantics.md
("Notifications"). What an attempt's result becomes is decided in ``verdicts``; the
operator's API lives in ``queue_operations``; both are re-exported here for callers of
``scheduler_core.reach.queue``."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from scheduler_core.db.outage import Backoff
from scheduler_core.reach.base import Delivery, Provider, RenderedMessage
from scheduler_core.reach.queue_operations import (
    BULK_BATCH,
    BULK_MAX,
    FAILURE_CLASSES,
    QUEUE_STATUSES,
    SETTLE_GRACE_MS,
    BulkPreview,
    BulkResult,
    QueueOperations,
    QueuePage,
    QueueRow,
    held_until,
)
from scheduler_core.reach.verdicts import LAST_ERROR_MAX, LEASE_LOST, Verdict, decide, last_error, retry_or_dead
from scheduler_core.statuses import QueueStatus
from scheduler_core.store.reach_queue import QueuedMessage, QueueRepository, Settlement
from scheduler_core.store.transactions import HeldConnection, is_unreachable

__all__ = [
    "BULK_BATCH",
    "BULK_MAX",
    "FAILURE_CLASSES",
    "LAST_ERROR_MAX",
    "LEASE_LOST",
    "QUEUE_STATUSES",
    "ROUND_LIMIT",
    "SEND_TIMEOUT_MS",
    "SETTLE_GRACE_MS",
    "SKIPPED_RETRIES",
    "BulkPreview",
    "BulkResult",
    "DeliveryRounds",
    "QueueOperations",
    "QueuePage",
    "QueueRow",
    "RoundReport",
    "Verdict",
    "decide",
    "held_until",
    "last_error",
]

logger = logging.getLogger("scheduler_core.reach.queue")
ROUND_LIMIT = 100
_COUNTER = {"sent": "sent", "pending": "retried", "dead": "dead", "unknown": "unknown"}
SEND_TIMEOUT_MS = 30_000
SKIPPED_RETRIES = 5  # empty claims a round retries while due rows are locked by others
_pause = threading.Event().wait  # a relative wait that also behaves under libfaketime


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
                    retry_or_dead(message.entry, "provider_unavailable", unavailable), None)
        if sendable:
            try:
                marked = self.repo.mark_sending_many([m.entry.queue_id for m in sendable], token, held.get())
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                # Whether the rows are marked is unknown, but nothing was sent: none is sent now,
                # and each goes back to the queue (the settlement below, written until answered),
                # not to recovery, which would have to call a plain provider's message unknown.
                held.drop(broken=True)
                error = last_error("transient_failure", "the database did not answer before sending")
                for message in sendable:
                    verdicts[message.entry.queue_id] = (retry_or_dead(message.entry, "transient_failure", error), None)
                marked, sendable = set(), []
            sendable = [m for m in sendable if m.entry.queue_id in marked]  # the others were lost: not sent
        if sendable:
            for message, delivery in zip(sendable, self._send_keeping_lease(providers, sendable, token, senders),
                                         strict=True):
                provider = providers[message.entry.provider]
                verdicts[message.entry.queue_id] = (decide(delivery, provider.idempotent, message.entry),
                                                    delivery.message_id)
        applied = self._settle(token, [
            Settlement(queue_id, verdict.status, message_id, verdict.last_failure, verdict.retry_in_ms,
                       verdict.last_error)
            for queue_id, (verdict, message_id) in verdicts.items()], held) if verdicts else set()
        if len(applied) < len(verdicts):
            logger.warning("queue: %d of a wave's leases lost while sending; recovery settles them",
                           len(verdicts) - len(applied))
        return [verdicts[m.entry.queue_id][0].status if m.entry.queue_id in applied else "lost" for m in wave]

    def _settle(self, token: str, settlements: list[Settlement], held: HeldConnection) -> set[str]:
        """``settle_many``, written again while the database does not answer (a failover): the
        outcomes are known, the messages must not be judged as a dead owner's. Tried for as long
        as the wave's leases (renewed right before) last; then recovery decides, as before.
        Written again, it applies to the rows the first write did not reach; the others are
        read back (``settled_as``): their row already says what this node decided."""
        deadline = time.monotonic() + self.repo.lease_ms / 1000
        backoff, since = Backoff(0.1, 2.0), None
        while True:
            try:
                applied = self.repo.settle_many(token, settlements, held.get())
                if since is not None:
                    missing = [s for s in settlements if s.queue_id not in applied]
                    applied |= self.repo.settled_as(missing) if missing else set()
                    logger.warning("queue: a wave's settlement written after %.1f s without a database",
                                   time.monotonic() - since)
                return applied
            except Exception as exc:
                held.drop(broken=True)
                if not is_unreachable(exc) or time.monotonic() >= deadline:
                    raise
                if since is None:
                    since = time.monotonic()
                    logger.warning("queue: settling a wave of %d found no database (%s); writing it again until "
                                   "its leases run out", len(settlements), type(exc).__name__)
                _pause(min(backoff.next(), max(0.0, deadline - time.monotonic())))

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
                except Exception as exc:  # no database (a failover): said without a traceback
                    logger.warning("queue: lease renewal failed", exc_info=None if is_unreachable(exc) else exc)

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
            if message.entry.status == QueueStatus.SENDING and not idempotent:
                verdict = Verdict(QueueStatus.UNKNOWN, "transient_failure", last_error=error)
            else:
                verdict = retry_or_dead(message.entry, "transient_failure", error)
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
