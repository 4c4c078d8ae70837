"""Keeping leases alive, and estimating the DB clock for diagnostics.

The LeaseKeeper renews every execution this node owns (running or queued) about every
lease/3, in one statement for all of them. A lease that can no longer be renewed cancels its
runner with reason ``lease_lost``: from then on it may not publish any outcome.
"""

from __future__ import annotations

import logging
import threading
import time

from scheduler_core.db.outage import Outage
from scheduler_core.executors.base import CancelSignal
from scheduler_core.store.executions import ExecutionRepository

logger = logging.getLogger("scheduler_core.leases")


class DbClockEstimate:
    """DB time extrapolated from the last reading with the local monotonic clock.

    Used only for timestamps shown to people (attempt start/finish); never for a lease.
    """

    def __init__(self) -> None:
        self._db_ms = 0  # until the first observation
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def observe(self, db_ms: int) -> None:
        with self._lock:
            self._db_ms, self._at = db_ms, time.monotonic()

    def now_ms(self) -> int:
        with self._lock:
            return self._db_ms + int((time.monotonic() - self._at) * 1000)


class LeaseKeeper:
    def __init__(self, executions: ExecutionRepository, interval_ms: int, lease_ms: int,
                 outage: Outage | None = None) -> None:
        self._executions = executions
        self._outage = outage or Outage("lease keeper")
        self._interval = interval_ms / 1000
        self._lease_s = lease_ms / 1000
        self._owned: dict[str, CancelSignal] = {}
        self._renewed_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="hai-lease-keeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def add(self, token: str, signal: CancelSignal) -> None:
        with self._lock:
            self._owned[token] = signal
            self._renewed_at[token] = time.monotonic()

    def remove(self, token: str) -> None:
        with self._lock:
            self._owned.pop(token, None)
            self._renewed_at.pop(token, None)

    def holds(self, token: str) -> bool:
        """The lease of ``token`` is still this node's as far as it knows: renewed within a lease,
        or not yet found lost (a runner asks before it tries a write again)."""
        with self._lock:
            return token in self._owned

    def tokens(self) -> list[str]:
        with self._lock:
            return list(self._owned)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.renew_now()

    def renew_now(self) -> None:
        tokens = self.tokens()
        if not tokens:
            return
        started = time.monotonic()
        try:
            lost = self._executions.renew(tokens)
        except Exception as exc:
            # The database did not answer. Keep trying; but once a whole lease has passed
            # without a successful renewal, another node may own it: stop the attempt.
            self._outage.report(exc, logger, "lease renewal failed; will retry")
            with self._lock:
                lost = {t for t in tokens if started - self._renewed_at.get(t, started) >= self._lease_s}
        else:
            self._outage.answered()
            with self._lock:
                for token in tokens:
                    if token in self._renewed_at:
                        self._renewed_at[token] = started
        for token in lost:
            self._cancel(token)

    def _cancel(self, token: str) -> None:
        with self._lock:
            signal = self._owned.pop(token, None)
            self._renewed_at.pop(token, None)
        if signal is not None:
            logger.warning("lease lost for execution token %s; cancelling its attempt", token)
            signal.cancel("lease_lost")
