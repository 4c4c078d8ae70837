"""Group commit of owner writes: many runners' begins and finishes in few transactions. One flusher
thread per kind writes what is queued as one batch (a row the database refuses fails alone), keeps
its connection while batches follow, and never waits for a timer -- except that terminal commits
wait, briefly and bounded, while the node still has starts to make (docs/architecture.md, "Group
commit")."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from scheduler_core.model import LogPersistence
from scheduler_core.statuses import LogPersistenceStatus
from scheduler_core.store import ExecutionRepository, LogRepository
from scheduler_core.store.executions import BeginRequest, FinishRequest
from scheduler_core.store.transactions import HeldConnection, is_unreachable

logger = logging.getLogger("scheduler_core.batching")
T = TypeVar("T")
R = TypeVar("R")
MAX_BATCH = 500  # rows per transaction: bounds statement size and lock hold time
# Begins: the starts of a batch wait for its commit, so two of 100 start half of them sooner than
# one of 200 (the node's claims come in batches of this size too, runtime/node.py).
BEGIN_BATCH = 100
RELEASE_S = 0.05  # a flusher with nothing to do for this long gives its connection back
IDLE_EXIT_S = 2.0  # ... and ends after this long (a new submit restarts it)
DEFER_MAX_S = 1.0  # a deferred write waits at most this long for the starts to be made ...
DEFER_BATCH = MAX_BATCH  # ... and no longer once a whole batch is queued (one large batch is cheap)
DEFER_POLL_S = 0.005  # how often a deferring flusher asks again


_SETTLING = threading.Lock()  # orders Answer's callback registration against its settling (held briefly)


class Answer(Generic[R]):
    """One request's answer from a group commit: ``result()`` waits for it, ``add_done_callback``
    runs a function with it once it is there (at once if it is).

    What ``concurrent.futures.Future`` does for this, without its Condition and RLock: each
    execution waits for three answers (its begin, its terminal commit, and ``Runner.done``, the
    record), and building those primitives was about 5 % of a node's CPU in a burst
    (bench/PROFILE.md). One plain lock, taken at creation and released when the answer is set,
    is what a waiter blocks on.
    """

    __slots__ = ("_callbacks", "_error", "_ready", "_settled", "_value")

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()
        self._settled = False
        self._value: R | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Answer[R]], object]] = []

    def set_result(self, value: R) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value: R | None, error: BaseException | None) -> None:
        with _SETTLING:
            if self._settled:
                raise RuntimeError("an answer is set once")
            self._value, self._error, self._settled = value, error, True
            callbacks, self._callbacks = self._callbacks, []
        self._ready.release()
        for callback in callbacks:
            self._call(callback)

    def add_done_callback(self, callback: Callable[[Answer[R]], object]) -> None:
        with _SETTLING:
            if not self._settled:
                self._callbacks.append(callback)
                return
        self._call(callback)

    def _call(self, callback: Callable[[Answer[R]], object]) -> None:
        try:
            callback(self)
        except Exception:  # as Future does: a failing callback must not stop the others
            logger.exception("a group-commit callback failed")

    def done(self) -> bool:
        return self._settled

    def result(self, timeout: float | None = None) -> R:
        """The answer, or its exception raised; TimeoutError if it is not there in ``timeout`` s."""
        if not self._settled:
            if not self._ready.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError("no answer yet")
            self._ready.release()  # the next waiter passes too
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class GroupCommit(Generic[T, R]):
    """Requests from many threads, flushed together on one thread.

    ``flush(batch)`` returns one result (or exception) per request, in order. The flusher
    thread starts on the first submit and ends after ``IDLE_EXIT_S`` without work, so there is
    nothing to start or stop: a closed node leaves no thread behind once its writes are done.
    """

    def __init__(self, name: str, flush: Callable[[list[T]], Sequence[R | Exception]],
                 max_batch: int = MAX_BATCH, on_idle: Callable[[], None] | None = None) -> None:
        self._name = name
        self._flush = flush
        self._max_batch = max_batch
        self._on_idle = on_idle
        self._queue: list[tuple[T, Answer[R]]] = []
        self._queued_at = 0.0  # when the oldest queued request came (monotonic)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._draining = False
        self._flushing = False
        self._defer: Callable[[], bool] | None = None

    def defer_while(self, busy: Callable[[], bool]) -> None:
        """Hold queued writes while ``busy()`` says more urgent work waits (the node's starts),
        for at most ``DEFER_MAX_S`` and only until ``DEFER_BATCH`` are queued; a drain never
        waits. ``busy`` is called with this group commit's lock held: it must not submit here."""
        self._defer = busy

    def pending(self) -> bool:
        """Something is queued or being written."""
        return bool(self._queue) or self._flushing

    def submit(self, item: T) -> Answer[R]:
        return self.submit_many([item])[0]

    def submit_many(self, items: Sequence[T]) -> list[Answer[R]]:
        """Queue ``items`` at once: a flusher that is waiting takes them in one batch (queued one
        by one, it would wake on the first and write it alone, the rest after that commit)."""
        futures: list[Answer[R]] = [Answer() for _ in items]
        if not futures:
            return futures
        with self._cond:
            if not self._queue:
                self._queued_at = time.monotonic()
            self._queue.extend(zip(items, futures, strict=True))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"hai-{self._name}", daemon=True)
                self._thread.start()
            self._cond.notify()
        return futures

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._wait_for_work():
                        self._thread = None
                        return
                    batch, self._queue = self._queue[:self._max_batch], self._queue[self._max_batch:]
                    self._queued_at = time.monotonic()
                    self._flushing = True
                try:
                    self._run(batch)
                finally:
                    self._flushing = False
        finally:  # ended abnormally (not even an Exception): let a new flusher take what is queued
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None
                    if self._queue:
                        self._thread = threading.Thread(target=self._loop, name=f"hai-{self._name}", daemon=True)
                        self._thread.start()

    def _wait_for_work(self) -> bool:
        """(Lock held.) False: nothing came for ``IDLE_EXIT_S`` (or draining), the thread ends.
        A pause longer than ``RELEASE_S`` gives the connection back first: an idle node holds
        none, and a burst, whose flushes follow each other, keeps one."""
        if not self._queue:
            if not self._draining:
                self._cond.wait(RELEASE_S)
            if not self._queue:
                if self._on_idle is not None:
                    self._on_idle()
                if not self._draining:
                    self._cond.wait(IDLE_EXIT_S - RELEASE_S)
        if not self._queue:
            return False
        self._hold()
        return True

    def _hold(self) -> None:
        """(Lock held, something queued.) Wait while the node has more urgent work (``defer_while``)."""
        busy = self._defer
        if busy is None:
            return
        until = self._queued_at + DEFER_MAX_S
        while not self._draining and len(self._queue) < DEFER_BATCH and time.monotonic() < until and busy():
            self._cond.wait(DEFER_POLL_S)

    def drain(self) -> None:
        """Return once everything submitted is written and the flusher has ended (its
        connection given back): ``close()`` leaves no connection checked out."""
        with self._cond:
            self._draining = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            self._draining = False

    def _run(self, batch: list[tuple[T, Answer[R]]]) -> None:
        try:
            results = list(self._flush([item for item, _ in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"{self._name} flush answered {len(results)} of {len(batch)} requests")
        except Exception as exc:  # a bug in flush: every waiter learns it, none hangs
            logger.exception("%s flush failed", self._name)
            results = [exc] * len(batch)
        except BaseException as exc:  # the thread is ending: still answer every waiter
            for _, future in batch:
                future.set_exception(RuntimeError(f"{self._name} flush interrupted: {exc!r}"))
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)


def one_by_one_on_failure(batch: list[T], run: Callable[[list[T]], list[R]]) -> list[R | Exception]:
    """``run(batch)``; if it raises, run each request alone so one bad row fails alone."""
    try:
        return list(run(batch))
    except Exception as exc:
        if len(batch) == 1 or is_unreachable(exc):  # no database: one by one would fail alike, N times
            return [exc] * len(batch)
        logger.warning("a batch of %d writes failed (%s); writing them one by one", len(batch), exc)
    results: list[R | Exception] = []
    for item in batch:
        try:
            results.extend(run([item]))
        except Exception as exc:
            results.append(exc)
    return results


@dataclass(frozen=True)
class FinishOutcome:
    committed: bool  # False: the lease was lost, nothing changed
    persistence: LogPersistence  # of the logs, when committed


class OwnerWrites:
    """The node's two group commits: attempt begins and terminal commits (with projection)."""

    def __init__(self, executions: ExecutionRepository, logs: LogRepository) -> None:
        self._executions = executions
        self._logs = logs
        self._begin_conn = HeldConnection(executions.engine)
        self._finish_conn = HeldConnection(executions.engine)
        self.begins: GroupCommit[BeginRequest, bool] = GroupCommit(
            "begin", self.write_begins, BEGIN_BATCH, on_idle=self._begin_conn.drop)
        self.finishes: GroupCommit[FinishRequest, FinishOutcome] = GroupCommit(
            "finish", self.write_finishes, on_idle=self._finish_conn.drop)

    def drain(self) -> None:
        """Every write submitted is done, the flushers have ended and their connections are back."""
        self.begins.drain()
        self.finishes.drain()
        self._begin_conn.drop()  # no flusher runs now: nobody else uses them
        self._finish_conn.drop()

    def write_begins(self, batch: list[BeginRequest]) -> list[bool | Exception]:
        """One batch of begins (the begin group commit's flush): per request, began or not."""
        def run(requests: list[BeginRequest]) -> list[bool]:
            try:
                begun = self._executions.begin_attempts(requests, self._begin_conn.get())
            except Exception:
                self._begin_conn.drop(broken=True)
                raise
            return [r.occurrence_id in begun for r in requests]

        return one_by_one_on_failure(batch, run)

    def write_finishes(self, batch: list[FinishRequest]) -> list[FinishOutcome | Exception]:
        """One batch of terminal commits with their projection (the finish group commit's flush)."""
        return one_by_one_on_failure(batch, self._finish)

    def _finish(self, requests: list[FinishRequest]) -> list[FinishOutcome]:
        try:
            result = self._executions.finish_many(requests, conn=self._finish_conn.get())
        except Exception:
            self._finish_conn.drop(broken=True)
            raise
        outcomes = []
        for r in requests:
            if r.occurrence_id not in result.committed:
                outcomes.append(FinishOutcome(False, LogPersistence(LogPersistenceStatus.UNCONFIRMED)))
            elif not r.attempts or r.occurrence_id in result.persisted:
                outcomes.append(FinishOutcome(True, LogPersistence(LogPersistenceStatus.PERSISTED)))
            else:  # the shared projection failed: this row's on its own, as a repair would
                outcomes.append(FinishOutcome(True, self._project_alone(r, result.projection_error)))
        return outcomes

    def _project_alone(self, r: FinishRequest, batch_error: str | None) -> LogPersistence:
        done = replace(r.execution, status=r.status, reason=r.reason, attempts=tuple(r.attempts),
                       log_persistence=LogPersistenceStatus.PENDING)
        try:
            self._logs.project(done)
        except Exception as exc:  # never turns the outcome into a failure: pending, repairable
            logger.warning("log projection of %s failed (pending, repairable): %s", r.occurrence_id, exc)
            return LogPersistence(LogPersistenceStatus.PENDING, str(exc))
        if batch_error:
            logger.info("log projection of %s succeeded alone after its batch failed: %s", r.occurrence_id,
                        batch_error)
        return LogPersistence(LogPersistenceStatus.PERSISTED)
