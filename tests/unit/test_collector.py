"""The node collects Python's garbage before a busy minute, not in the middle of it
(scheduler_core/runtime/collector.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.collector import BURST, BurstCollector
from scheduler_core.runtime.leases import DbClockEstimate
from scheduler_core.runtime.planner import Planner

MINUTE = 60_000
START = 1_700_000_000_000 - 1_700_000_000_000 % MINUTE  # a minute boundary
TICK_MS = 1_000


def planner_with(count: int) -> Planner:
    planner = Planner()
    tasks = {f"t{i}": TaskDefinition(id=f"t{i}", name=f"T {i}", cron="* * * * *") for i in range(count)}
    planner.sync(tasks, START + 10_000)
    planner.due(START + 10_000)  # this minute's occurrences, as a tick takes them
    planner.replan()
    assert planner.next_fire() == START + MINUTE
    return planner


def at(ms: int) -> DbClockEstimate:
    clock = DbClockEstimate()
    clock.observe(ms)
    return clock


@pytest.fixture
def full_scans() -> Iterator[list[str]]:
    """Names of the threads on which a full (generation 2) collection started."""
    seen: list[str] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(threading.current_thread().name)

    gc.callbacks.append(watch)
    yield seen
    gc.callbacks.remove(watch)


def test_a_busy_minute_is_preceded_by_one_full_collection(full_scans: list[str]) -> None:
    boundary = START + MINUTE
    collector = BurstCollector(planner_with(BURST), at(boundary - 500), TICK_MS)
    collector.before_next_minute()
    assert collector.collections == 1 and full_scans.count(threading.current_thread().name) >= 1
    assert collector.last_at_ms is not None and boundary - 600 < collector.last_at_ms < boundary
    collector.before_next_minute()  # the same minute: decided once
    assert collector.collections == 1


def test_a_quiet_minute_is_not_collected_for(full_scans: list[str]) -> None:
    collector = BurstCollector(planner_with(BURST - 1), at(START + MINUTE - 500), TICK_MS)
    collector.before_next_minute()
    assert collector.collections == 0


def test_it_waits_for_the_last_tick_before_the_minute_and_never_collects_too_late() -> None:
    boundary = START + MINUTE
    early = BurstCollector(planner_with(BURST), at(boundary - 5_000), TICK_MS)
    early.before_next_minute()  # a later tick is still to come before the minute
    assert early.collections == 0
    early._clock.observe(boundary - 800)
    early.before_next_minute()
    assert early.collections == 1
    late = BurstCollector(planner_with(BURST), at(boundary - 50), TICK_MS)
    late.before_next_minute()  # a collection could still run when the minute begins
    assert late.collections == 0


def test_a_process_that_turned_the_collector_off_is_left_so() -> None:
    collector = BurstCollector(planner_with(BURST), at(START + MINUTE - 500), TICK_MS)
    gc.disable()
    try:
        collector.before_next_minute()
    finally:
        gc.enable()
    assert collector.collections == 0


def test_the_node_prepares_before_a_busy_minute_only_even_with_the_collector_off() -> None:
    """``prepare`` (the node reads the live nodes, so that it claims its own share first) runs
    once before each busy minute, whether or not Python's collector is on; never for a quiet one."""
    calls: list[int] = []
    busy = BurstCollector(planner_with(BURST), at(START + MINUTE - 500), TICK_MS, lambda: calls.append(1))
    gc.disable()
    try:
        busy.before_next_minute()
        busy.before_next_minute()  # decided once
    finally:
        gc.enable()
    assert calls == [1] and busy.collections == 0
    quiet = BurstCollector(planner_with(BURST - 1), at(START + MINUTE - 500), TICK_MS, lambda: calls.append(2))
    quiet.before_next_minute()
    assert calls == [1]
