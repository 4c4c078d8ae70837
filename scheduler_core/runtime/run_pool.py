"""The node's runners on its bounded thread pool, and how much more work it has room for.

A claimed occurrence becomes a ``Runner`` submitted here; it waits for one of ``max_concurrency``
threads. The pool measures how long a run holds a thread (a moving average), and from that pace
says how many more executions the node may claim (``free_capacity``): the free threads plus a
prefetch of what they start within ``PREFETCH_HORIZON_S``. ``shutdown`` waits for every runner,
its terminal commit decided too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.runner import Runner

PREFETCH_HORIZON_S = 0.5  # claim what the threads start within this, at their recent pace
MAX_PREFETCH = 1_000
PACE_WEIGHT = 0.1  # of the newest run in the moving average


class RunPool:
    """``freed`` is called on the pool thread each time a run gives its thread back."""

    def __init__(self, ctx: RuntimeContext, freed: Callable[[], None]) -> None:
        self.ctx = ctx
        self._freed = freed
        self._executor: ThreadPoolExecutor | None = None
        self._pooled: set[Runner] = set()  # handed to the pool, not yet settled
        self._lock = threading.Lock()
        self._waiting = 0  # submitted, not yet on a thread (under _lock)
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

    def submit(self, runner: Runner) -> None:
        self.ctx.register_runner(runner)
        assert self._executor is not None
        with self._lock:
            self._pooled.add(runner)
            self._waiting += 1
        runner.done.add_done_callback(lambda _: self._forget(runner))
        try:
            self._executor.submit(self._timed, runner)
        except BaseException:  # (a pool shut down) it will never wait for a thread
            with self._lock:
                self._waiting -= 1
            raise

    def shutdown(self) -> None:
        """Wait for the runners to end -- their terminal commits decided, too."""
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
        began = time.monotonic()
        try:
            runner.start()
        finally:
            took = time.monotonic() - began
            self._run_seconds = took if not self._run_seconds else (1 - PACE_WEIGHT) * self._run_seconds \
                + PACE_WEIGHT * took
            self._freed()  # the thread is free now, the terminal commit perhaps not yet

    def _forget(self, runner: Runner) -> None:
        with self._lock:
            self._pooled.discard(runner)
