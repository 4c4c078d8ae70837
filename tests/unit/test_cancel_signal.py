"""The cancellation signal a runner and its handler share (executors/base.py)."""

from __future__ import annotations

import threading
import time

from scheduler_core.executors.base import CancelSignal


def test_a_waiter_wakes_when_another_thread_cancels() -> None:
    signal = CancelSignal()
    woke: list[bool] = []
    waiting = threading.Thread(target=lambda: woke.append(signal.wait(60)))
    waiting.start()
    while signal._event is None:  # the waiter made its Event: it is (about to be) asleep on it
        threading.Event().wait(0.01)
    signal.cancel("lease_lost")
    waiting.join(20)
    assert not waiting.is_alive(), "the waiter slept through the cancellation"
    assert woke == [True] and signal.reason == "lease_lost"


def test_cancelled_before_anyone_waits() -> None:
    signal = CancelSignal()
    assert not signal.is_set() and signal.reason is None
    signal.cancel("closing")
    signal.cancel("deleted")  # the first reason stays
    assert signal.is_set() and signal.reason == "closing"
    assert signal.wait(60) is True
    assert signal._event is None  # nobody had to sleep: no Event was made


def test_a_wait_that_times_out_says_not_cancelled() -> None:
    signal = CancelSignal()
    assert signal.wait(0.01) is False
    assert not signal.is_set()


def test_many_waiters_and_cancellers_at_once() -> None:
    """200 waiters asleep on their Events, then 200 cancellers at once: every waiter wakes.

    The cancellers start only once every waiter has made its Event (it is asleep on it, or
    about to be), so a waiter can no longer see the flag before sleeping: a cancel that does
    not set the Event leaves the waiters asleep until their 60 s and fails the join."""
    signals = [CancelSignal() for _ in range(200)]
    results: dict[int, bool] = {}

    def wait(i: int) -> None:
        results[i] = signals[i].wait(60)

    waiters = [threading.Thread(target=wait, args=(i,)) for i in range(200)]
    for t in waiters:
        t.start()
    while any(s._event is None for s in signals):
        threading.Event().wait(0.01)
    cancellers = [threading.Thread(target=s.cancel, args=(f"r{i}",)) for i, s in enumerate(signals)]
    for t in cancellers:
        t.start()
    deadline = time.monotonic() + 10  # one deadline for all: well before the waiters' own 60 s
    for t in waiters + cancellers:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in waiters), "a waiter slept through its cancellation"
    assert results == {i: True for i in range(200)}
    assert [s.reason for s in signals] == [f"r{i}" for i in range(200)]
