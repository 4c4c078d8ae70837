"""Stopping a long-running process on SIGTERM or SIGINT, whichever thread the kernel hands it to.

A Python signal handler runs in the main thread, between bytecodes. The kernel delivers a
signal sent to the process to any thread that does not block it; when it lands on another
thread while the main thread sleeps in a lock wait (``threading.Event.wait``), that wait is not
interrupted, and the handler runs only once the main thread wakes for another reason. It
happens when SIGTERM follows SIGCONT (a supervisor resuming a stopped process in order to stop
it): the main thread is still waking from the stop and the signal goes to another thread. A
child with four busy threads, stopped, then sent SIGCONT and SIGTERM, missed its SIGTERM in 17
of 40 tries here; a node waiting with ``Event.wait()`` and no timeout then never stops. So the
main thread waits in short slices, and a missed wake-up costs at most one slice.
"""

from __future__ import annotations

import signal
import threading
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
WAIT_SLICE_S = 0.2  # how long a SIGTERM that landed on another thread can wait for the main thread


def stop_on_signals(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> threading.Event:
    """An event set by any of ``signals`` (installed now; call it from the main thread)."""
    stop = threading.Event()
    for signum in signals:
        signal.signal(signum, lambda *_: stop.set())
    return stop


def wait_for_stop(stop: threading.Event, timeout: float | None = None) -> bool:
    """Wait in the main thread until ``stop`` is set (True) or ``timeout`` seconds pass (False).

    Waits in slices of WAIT_SLICE_S, so a signal handler whose signal landed on another thread
    runs within one slice (see the module's docstring)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
        if left <= 0:
            return stop.is_set()
        if stop.wait(left):
            return True
