"""Python's garbage collector, run before a busy minute rather than in the middle of it.

CPython's cyclic collector stops every thread of the process while it scans. Its oldest
generation is scanned when enough objects have survived the younger ones, and with a node's
heap (thousands of definitions, the database driver's caches) that scan takes tens of
milliseconds -- measured 35-100 ms on the hosts of bench/RESULTS.md. Left to itself it tends
to fall inside a burst, since a burst is when most objects are made: one such pause delayed
every start behind it (bench/PROFILE.md, fourth round).

So once the next thing a node waits for is a minute with many due occurrences, and there is
time before it, the node collects then: the minute's starts begin with the collector's counts
at zero, and its own allocations rarely reach a full scan before they are done. Nothing is
collected for quiet minutes, and a process that turned the collector off (``gc.disable()``)
is left as it chose.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from scheduler_core.runtime.leases import DbClockEstimate
from scheduler_core.runtime.planner import Planner

logger = logging.getLogger("scheduler_core.collector")
BURST = 100  # due occurrences that make a minute busy enough to collect before it
MIN_LEAD_S = 0.1  # the collection must end before the minute begins: no later than this
MIN_HORIZON_S = 1.0  # with short tick intervals, decide within this of the minute


class BurstCollector:
    """``prepare`` is called first, before each busy minute (whether or not the collector is on):
    the node's other work that belongs before the minute rather than in it."""

    def __init__(self, planner: Planner, clock: DbClockEstimate, tick_interval_ms: int,
                 prepare: Callable[[], None] | None = None) -> None:
        self._planner = planner
        self._clock = clock
        self._prepare = prepare
        self._horizon_s = max(tick_interval_ms / 1000, MIN_HORIZON_S)
        self._decided: int | None = None  # the minute already decided on (collected or not)
        self.collections = 0
        self.last_at_ms: int | None = None  # DB-clock estimate when it last collected

    def before_next_minute(self) -> None:
        """Called by the node's loop after each tick: collect now if the next due minute is
        busy, begins within one tick interval (this is the last wait before it; with ticks
        shorter than ``MIN_HORIZON_S``, within that) and at least ``MIN_LEAD_S`` from now.
        Decided once per minute."""
        fire = self._planner.next_fire()
        if fire is None or fire == self._decided:
            return
        lead_s = (fire - self._clock.now_ms()) / 1000
        if lead_s > self._horizon_s:
            return  # a later tick decides
        self._decided = fire
        if lead_s < MIN_LEAD_S or not self._planner.planned_at(fire, BURST):
            return
        if self._prepare is not None:
            self._prepare()
        if not gc.isenabled():
            return
        began = time.perf_counter()
        self.last_at_ms = self._clock.now_ms()
        gc.collect()
        self.collections += 1
        logger.debug("collected %.1f ms before a busy minute", (time.perf_counter() - began) * 1000)
