"""The node's runners on its bounded thread pool, and how much more work it has room for.

A claimed occurrence becomes a ``Runner`` submitted here; it waits for one of ``max_concurrency``
threads. A fresh claim's first begin is written before it has a thread ("begin ahead"): for the
idle threads and for what the busy ones take within ``AHEAD_HORIZON_S`` at their recent pace,
so that a thread is never held through a begin's commit and a begin batch is not bounded by the
thread count; the runner is handed to a thread once its begin has answered, and its handler is
called only then. A begun runner waits for a thread about that horizon at most: the window in
which a crash leaves an attempt journaled as begun whose handler was not called (``unknown``, as
a crash during today's begin commit does) stays that short.

The pool measures how long a run holds a thread (a moving average), and from that pace says how
many more executions the node may claim (``free_capacity``): the free threads plus a prefetch of
what they start within ``PREFETCH_HORIZON_S``. ``shutdown`` waits for every runner, its terminal
commit decided too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.runner import Runner

PREFETCH_HORIZON_S = 0.5  # claim what the threads start within this, at their recent pace
MAX_PREFETCH = 1_000
PACE_WEIGHT = 0.1  # of the newest run in the moving average
AHEAD_HORIZON_S = 0.05  # begin ahead what the threads take within this, at their recent pace ...
MAX_AHEAD = 200  # ... and at most this many begun runners waiting for a thread


class RunPool:
    """``freed`` is called on the pool thread each time a run gives its thread back."""

    def __init__(self, ctx: RuntimeContext, freed: Callable[[], None]) -> None:
        self.ctx = ctx
        self._freed = freed
        self._executor: ThreadPoolExecutor | None = None
        self._pooled: set[Runner] = set()  # handed to the pool, not yet settled
        self._lock = threading.Condition()
        self._waiting = 0  # submitted, not yet on a thread (under _lock)
        self._on_thread = 0  # runners holding a thread now
        self._to_begin: deque[Runner] = deque()  # may begin ahead, not yet begun (room came short)
        self._begun_ahead: set[Runner] = set()  # begun ahead (or begin in flight), not yet on a thread
        self._outstanding = 0  # submitted here, not yet handed to the executor
        self._run_seconds = 0.0  # moving average of how long a run holds a thread (0: none yet)

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=self.ctx.config.max_concurrency, thread_name_prefix="hai-run")

    @property
    def waiting(self) -> int:
        """Runners submitted that have no thread yet."""
        return self._waiting

    def free_capacity(self) -> int:
        """How many more executions this node claims: its threads plus a prefetch, minus what it
        runs. The prefetch is what its threads start within ``PREFETCH_HORIZON_S`` at the pace
        they have been running (at least ``max_queued``): short handlers are claimed in large
        batches, long ones barely beyond the free threads, so that no claimed work waits long
        for a thread here while another node could start it."""
        config = self.ctx.config
        prefetch = config.max_queued
        if self._run_seconds:
            pace = config.max_concurrency * PREFETCH_HORIZON_S / self._run_seconds
            prefetch = max(prefetch, min(MAX_PREFETCH, int(pace)))
        needing_thread = sum(1 for runner in self.ctx.runners() if not runner.committing)
        return max(0, config.max_concurrency + prefetch - needing_thread)

    def free_threads(self) -> int:
        """Threads no runner here is waiting for or holding (the claims of another node's share
        are for these only)."""
        needing_thread = sum(1 for runner in self.ctx.runners() if not runner.committing)
        return max(0, self.ctx.config.max_concurrency - needing_thread)

    def submit(self, runner: Runner) -> None:
        self.ctx.register_runner(runner)
        assert self._executor is not None
        ahead = runner.can_begin_ahead
        with self._lock:
            self._pooled.add(runner)
            self._waiting += 1
            self._outstanding += 1
            if ahead:
                self._to_begin.append(runner)
        runner.done.add_done_callback(lambda _: self._forget(runner))
        if ahead:
            self._begin_ahead()
        else:
            self._to_thread(runner)

    def _ahead_room(self) -> int:
        """(Lock held.) How many begun runners may wait for a thread: the idle threads, plus
        what the busy ones take within ``AHEAD_HORIZON_S`` at their pace."""
        threads = self.ctx.config.max_concurrency
        pace = int(threads * AHEAD_HORIZON_S / self._run_seconds) if self._run_seconds else 0
        return min(MAX_AHEAD, max(0, threads - self._on_thread) + pace)

    def _begin_ahead(self) -> None:
        """Submit the begins of waiting runners while there is room; each goes to a thread once
        its begin has answered (committed, refused, or not answered: the runner decides)."""
        while True:
            with self._lock:
                if not self._to_begin or len(self._begun_ahead) >= self._ahead_room():
                    return
                runner = self._to_begin.popleft()
                ahead = runner.can_begin_ahead  # (cancelled while it waited: it ends on a thread)
                if ahead:
                    self._begun_ahead.add(runner)
            if ahead:
                runner.begin_ahead().add_done_callback(self._handing(runner))
            else:
                self._to_thread(runner)

    def _handing(self, runner: Runner) -> Callable[[object], None]:
        return lambda _: self._to_thread(runner)

    def _to_thread(self, runner: Runner) -> None:
        try:
            assert self._executor is not None
            self._executor.submit(self._timed, runner)
        except BaseException:  # the pool is shut down: run it here rather than never
            self._timed(runner)
        finally:
            with self._lock:
                self._outstanding -= 1
                self._lock.notify_all()

    def shutdown(self) -> None:
        """Wait for the runners to end -- their terminal commits decided, too."""
        with self._lock:  # every runner is on the executor first (begins ahead answered)
            while self._outstanding:
                self._lock.wait(0.05)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            pending = [runner.done for runner in self._pooled]
        for done in pending:
            done.result()

    def _timed(self, runner: Runner) -> None:
        """Run on a pool thread, measuring how long it holds the thread (the prefetch follows it)."""
        with self._lock:
            self._waiting -= 1
            self._on_thread += 1
            self._begun_ahead.discard(runner)
        began = time.monotonic()
        try:
            runner.start()
        finally:
            took = time.monotonic() - began
            self._run_seconds = took if not self._run_seconds else (1 - PACE_WEIGHT) * self._run_seconds \
                + PACE_WEIGHT * took
            with self._lock:
                self._on_thread -= 1
            self._begin_ahead()
            self._freed()  # the thread is free now, the terminal commit perhaps not yet

    def _forget(self, runner: Runner) -> None:
        with self._lock:
            self._pooled.discard(runner)
