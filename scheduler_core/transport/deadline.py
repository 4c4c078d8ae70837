"""One deadline (and, optionally, one cancellation signal) over blocking socket work."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal, Protocol

StopCause = Literal["timeout", "cancelled"]
WATCHDOG_THREAD = "hai-scheduler-deadline"
POLL_S = 0.02  # how often a watchdog with a cancellation signal looks at it


class Cancellation(Protocol):
    """What a watchdog needs of a cancellation signal (``executors.base.CancelSignal`` is one)."""

    def is_set(self) -> bool: ...


def shutdown_socket(sock: socket.socket | None) -> None:
    """Wake every thread blocked on ``sock`` (connect, send, recv); never closes the descriptor."""
    if sock is not None:
        # The plain socket call, also for an SSLSocket: it wakes every thread blocked on the descriptor.
        with contextlib.suppress(OSError):  # closed already, or never connected
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class Watchdog:
    """Calls ``stop(cause)`` once if the deadline passes or ``signal`` is set before :meth:`finish`.

    The working thread blocks on sockets; the watchdog's own thread enforces the deadline by
    shutting them down (that is what ``stop`` should do), which makes any blocked socket call
    fail at once. Per-operation socket timeouts alone would let a server that trickles one byte a
    second hold the work forever. The lock makes ``finish`` and ``stop`` exclusive: once
    ``finish`` returned, ``stop`` never runs, so the caller may close its sockets safely.
    ``cause`` says why it fired (None: it did not).
    """

    def __init__(self, timeout_ms: int, stop: Callable[[StopCause], object],
                 signal: Cancellation | None = None) -> None:
        self._stop = stop
        self._signal = signal
        self._timeout_s = timeout_ms / 1000
        self._deadline = 0.0  # set by start
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self.cause: StopCause | None = None
        self._thread = threading.Thread(target=self._watch, name=WATCHDOG_THREAD, daemon=True)

    @property
    def fired(self) -> bool:
        return self.cause is not None

    def start(self) -> None:
        self._deadline = time.monotonic() + self._timeout_s
        self._thread.start()

    def _pause(self) -> float:
        remaining = max(0.0, self._deadline - time.monotonic())
        return remaining if self._signal is None else min(POLL_S, remaining)

    def _due(self) -> StopCause | None:
        if self._signal is not None and self._signal.is_set():
            return "cancelled"
        return "timeout" if time.monotonic() >= self._deadline else None

    def _watch(self) -> None:
        while not self._finished.wait(self._pause()):
            cause = self._due()
            if cause is not None:
                self._fire(cause)
                return

    def _fire(self, cause: StopCause) -> None:
        with self._lock:
            if self._finished.is_set():
                return
            self.cause = cause
            self._stop(cause)

    def finish(self) -> None:
        with self._lock:
            self._finished.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Watchdog:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.finish()
