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

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.runner import Runner

PREFETCH_HORIZON_S = 0.5  # claim what the threads start within this, at their recent pace
MAX_PREFETCH = 1_000
PACE_WEIGHT = 0.1  # of the newest run in the moving average
AHEAD_HORIZON_S = 0.05  # begin ahead what the threads take within this, at their recent pace ...
MAX_AHEAD = 200  # ... and at most this many begun runners waiting for a thread
logger = logging.getLogger("scheduler_core.node")


class Workers:
    """``count`` threads that run ``run(item)`` for each item submitted, in order of submission.

    Not ``concurrent.futures.ThreadPoolExecutor``: its workers share a semaphore (and each item
    gets a future with a lock of its own), and in a busy minute those locks were contended: a
    thread that waits for a lock gives up the GIL and waits again to get it back, behind every
    other thread of the node (bench/PROFILE.md, seventh round). Here a submit is one put on a
    ``queue.SimpleQueue``, which no worker holds a lock on while it runs.
    """

    def __init__(self, count: int, name: str, run: Callable[[Runner], None]) -> None:
        self._run = run
        self._queue: queue.SimpleQueue[Runner | None] = queue.SimpleQueue()
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, name=f"{name}_{i}", daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, item: Runner) -> None:
        if self._closed:
            raise RuntimeError("the workers are shut down")
        self._queue.put(item)

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._run(item)
            except Exception:  # the runner settles itself; this is a bug around it: keep the thread
                logger.exception("a run failed outside its runner")

    def shutdown(self) -> None:
        """Run what was submitted, then end every thread."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()


class RunPool:
    """``freed`` is called on the pool thread each time a run gives its thread back."""

    def __init__(self, ctx: RuntimeContext, freed: Callable[[], None]) -> None:
        self.ctx = ctx
        self._freed = freed
        self._executor: Workers | None = None
        self._pooled: set[Runner] = set()  # handed to the pool, not yet settled
        self._lock = threading.Condition()
        self._waiting = 0  # submitted, not yet on a thread (under _lock)
        self._on_thread = 0  # runners holding a thread now
        self._to_begin: deque[Runner] = deque()  # may begin ahead, not yet begun (room came short)
        self._begun_ahead: set[Runner] = set()  # begun ahead (or begin in flight), not yet on a thread
        self._outstanding = 0  # submitted here, not yet handed to the executor
        self._run_seconds = 0.0  # moving average of how long a run holds a thread (0: none yet)

    def start(self) -> None:
        self._executor = Workers(self.ctx.config.max_concurrency, "hai-run", self._timed)

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
        self.submit_all([runner])

    def submit_all(self, runners: list[Runner]) -> None:
        """Submit a claim's runners together: their begins ahead are queued at once (one batch)."""
        assert self._executor is not None
        for runner in runners:
            self.ctx.register_runner(runner)
        ahead = [runner.can_begin_ahead for runner in runners]
        with self._lock:  # once for all of them: the pool's threads take this lock too
            self._pooled.update(runners)
            self._waiting += len(runners)
            self._outstanding += len(runners)
            self._to_begin.extend(runner for runner, early in zip(runners, ahead, strict=True) if early)
        for runner in runners:
            runner.done.add_done_callback(self._forgetting(runner))
        now = [runner for runner, early in zip(runners, ahead, strict=True) if not early]
        self._begin_ahead()
        for runner in now:
            self._to_thread(runner)

    def _ahead_room(self) -> int:
        """(Lock held.) How many begun runners may wait for a thread: the idle threads, plus
        what the busy ones take within ``AHEAD_HORIZON_S`` at their pace."""
        threads = self.ctx.config.max_concurrency
        pace = int(threads * AHEAD_HORIZON_S / self._run_seconds) if self._run_seconds else 0
        return min(MAX_AHEAD, max(0, threads - self._on_thread) + pace)

    def _begin_ahead(self) -> None:
        """Submit the begins of waiting runners while there is room, all at once; each goes to a
        thread once its begin has answered (committed, refused, or not answered: the runner
        decides)."""
        while True:
            ahead: list[Runner] = []
            cancelled: list[Runner] = []
            with self._lock:
                room = self._ahead_room() - len(self._begun_ahead)
                while self._to_begin and len(ahead) < room:
                    runner = self._to_begin.popleft()
                    if runner.can_begin_ahead:
                        ahead.append(runner)
                        self._begun_ahead.add(runner)
                    else:  # cancelled while it waited: it ends on a thread
                        cancelled.append(runner)
            if not ahead and not cancelled:
                return
            if ahead:
                answers = self.ctx.writes.begins.submit_many([runner.ahead_request() for runner in ahead])
                for runner, answer in zip(ahead, answers, strict=True):
                    runner.ahead_answered(answer)
                    answer.add_done_callback(self._handing(runner))
            for runner in cancelled:
                self._to_thread(runner)

    def _handing(self, runner: Runner) -> Callable[[object], None]:
        return lambda _: self._to_thread(runner)

    def _forgetting(self, runner: Runner) -> Callable[[object], None]:
        return lambda _: self._forget(runner)

    def _to_thread(self, runner: Runner) -> None:
        try:
            assert self._executor is not None
            self._executor.submit(runner)
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
            self._executor.shutdown()
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
