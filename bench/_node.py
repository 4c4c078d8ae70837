"""One measured node process for idle.py, steady.py and notifications.py.

Usage: _node.py '<options as JSON>'

Options: url, node_id, concurrency (8), tick_ms (1000), max_queued (the product's default), warmup_ticks (0),
handler_ms ([low, high]: each task's handler takes a fixed time in that range; none by default),
reach (a Reach configuration, optional) and reach_mode: "tick" (delivery rounds on the
scheduler's tick, as in production: one round a minute) or "loop" (no scheduler; rounds back
to back through ``Reach.run_round``, to measure delivery capacity).

It counts every SQL statement (SQLAlchemy ``before_cursor_execute``, by leading verb) and
every commit of its engine, the ticks of its scheduler and its CPU time (all threads). With
``warmup_ticks`` > 0 the figures cover whole ticks only: from the end of that tick to the end
of the last tick before SIGTERM (start-up, like loading 10,000 definitions, is left out).
On SIGTERM it closes cleanly and prints one JSON object on the last stdout line (with every full
garbage collection of the process: its pause and where in the DB-clock minute it began).
``HAI_TEST_DB_CLOCK_OFFSET_MS`` moves its DB clock (scheduler_core.testing).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _common import COUNTED, galera_sync_wait_from_env
from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import wait_for_stop
from scheduler_core.reach import Reach, RoundReport
from scheduler_core.testing import set_clock_offset_from_env


@dataclass
class Reading:
    counts: Counter[str] = field(default_factory=Counter)  # COUNTED events so far
    verbs: Counter[str] = field(default_factory=Counter)  # statements by leading SQL word
    cpu_s: float = field(default_factory=time.process_time)
    at: float = field(default_factory=time.monotonic)
    ticks: int = 0


class Meter:
    """SQL and tick counters of one engine, read atomically. What is counted, as
    bench/_burst_node.py counts it: every statement through a cursor (SQLite's BEGIN
    IMMEDIATE among them), commits, rollbacks (read-only transactions end in one), the
    driver's own BEGINs and the pool's check-outs (each pinged first on a server)."""

    def __init__(self, engine: Engine) -> None:
        self._lock = threading.Lock()
        self._now = Reading()
        event.listen(engine, "before_cursor_execute", self._statement)
        for name in ("commit", "rollback", "begin", "checkout"):
            event.listen(engine, name, self._counter(f"{name}s"))

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        verb = (statement.split(None, 1) or ["?"])[0].upper()
        with self._lock:
            self._now.counts["statements"] += 1
            self._now.verbs[verb] += 1

    def _counter(self, name: str) -> Any:
        def count(*_: Any) -> None:
            with self._lock:
                self._now.counts[name] += 1

        return count

    def tick(self) -> Reading:
        with self._lock:
            self._now.ticks += 1
            return self._copy()

    def read(self) -> Reading:
        with self._lock:
            return self._copy()

    def _copy(self) -> Reading:
        now = self._now
        return Reading(Counter(now.counts), Counter(now.verbs), time.process_time(), time.monotonic(), now.ticks)


def delta(first: Reading, last: Reading) -> dict[str, Any]:
    counts = {name: last.counts[name] - first.counts[name] for name in COUNTED}
    return {**counts, "verbs": dict(last.verbs - first.verbs), "cpu_ms": round((last.cpu_s - first.cpu_s) * 1000, 1),
            "wall_s": round(last.at - first.at, 3), "ticks": last.ticks - first.ticks}


class Node:
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        concurrency = int(options.get("concurrency", 8))
        senders = int((options.get("reach") or {}).get("queue", {}).get("concurrency", 4))
        self.engine = create_engine({"url": options["url"], "pool_size": concurrency + 6 + senders})
        set_clock_offset_from_env(self.engine)  # HAI_TEST_DB_CLOCK_OFFSET_MS: the run's place in time
        self.meter = Meter(self.engine)
        self.started = 0
        self._started_lock = threading.Lock()
        self.rounds: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.first: Reading | None = None
        self.last: Reading | None = None
        self.scheduler: Scheduler | None = None
        self.reach: Reach | None = None
        if options.get("reach_mode") != "loop":
            config = SchedulerConfig(node_id=options["node_id"], max_concurrency=concurrency,
                                     tick_interval_ms=int(options.get("tick_ms", 1000)),
                                     max_queued=int(options.get("max_queued", SchedulerConfig.max_queued)))
            self.scheduler = Scheduler(self.engine, config, hooks={"on_task_execute": self._execute})
            self.scheduler.init()
            galera_sync_wait_from_env(self.engine)  # after init, whose Galera check would refuse it
            self.scheduler.add_tick_listener(self._on_tick)
        if options.get("reach") is not None:
            self.reach = Reach(self.engine, options["reach"], node_id=options["node_id"])
            self.reach.init()
            self._time_rounds(self.reach)

    def _execute(self, event: Any) -> None:
        with self._started_lock:  # the handler does nothing else: the engine's cost is what we measure
            self.started += 1
        low, high = self.options.get("handler_ms") or (0, 0)
        if high:  # a slow handler: a fixed duration per task within [low, high] ms
            spread = int(event.context.task_id.rsplit("-", 1)[-1]) * 7919 % (high - low + 1)
            event.signal.wait((low + spread) / 1000)

    def _on_tick(self, _now_ms: int) -> None:
        reading = self.meter.tick()
        warmup = int(self.options.get("warmup_ticks", 0))
        if warmup and reading.ticks == warmup:
            self.first = reading
        self.last = reading

    def _time_rounds(self, reach: Reach) -> None:
        """Record how long each delivery round takes (instrumentation around the public call)."""
        run_round = reach.run_round

        def timed() -> RoundReport:
            began = time.monotonic()
            report = run_round()
            if report.claimed or report.recovered:
                self.rounds.append({"claimed": report.claimed, "sent": report.sent, "lost": report.lost,
                                    "retried": report.retried, "seconds": round(time.monotonic() - began, 3)})
            return report

        reach.run_round = timed  # type: ignore[method-assign]

    def run(self) -> dict[str, Any]:
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        begin = self.meter.read()
        if self.scheduler is not None:
            if self.reach is not None and self.options.get("reach_mode") == "tick":
                self.reach.attach(self.scheduler)
            self.scheduler.start()
        if self.reach is not None and self.options.get("reach_mode") == "loop":
            self._loop_rounds(self.reach)
        wait_for_stop(self.stop)
        end = self.meter.read()
        if self.scheduler is not None:
            self.scheduler.close()
        if self.reach is not None:
            self.reach.close()
        self.engine.dispose()
        warm = self.first is not None and self.last is not None and self.last.ticks > self.first.ticks
        window = delta(self.first, self.last) if warm else delta(begin, end)  # type: ignore[arg-type]
        return {**window, "measured": "whole ticks after warm-up" if warm else "start to SIGTERM",
                "total_ticks": end.ticks, "started": self.started, "rounds": self.rounds}

    def _loop_rounds(self, reach: Reach) -> None:
        while not self.stop.is_set():
            if reach.run_round().claimed == 0:
                self.stop.wait(0.05)


class FullCollections:
    """Python's full (generation 2) collections in this process: how long each stopped the
    threads, and where in its DB-clock minute it began (steady.py counts those in a burst)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []  # (ms, ms into the minute)
        self._began = 0.0
        self._offset_ms = int(os.environ.get("HAI_TEST_DB_CLOCK_OFFSET_MS") or 0)
        gc.callbacks.append(self._watch)

    def _watch(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
            return
        into_minute = int(time.time() * 1000 + self._offset_ms) % 60_000
        self.seen.append((round((time.perf_counter() - self._began) * 1000, 1), into_minute))


if __name__ == "__main__":
    collections = FullCollections()
    node = Node(json.loads(sys.argv[1]))
    print(json.dumps({**node.run(), "full_collections": collections.seen}), flush=True)
