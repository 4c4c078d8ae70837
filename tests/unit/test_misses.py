"""What a node journals for a gap in the cluster's ticks (runtime/misses.py: plan_gap)."""

from __future__ import annotations

from scheduler_core.cron import cron_occurrence_id
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.misses import ROWS_PER_TASK, plan_gap
from scheduler_core.statuses import Trigger
from scheduler_core.task_policies import CatchupPolicy, Pause

MINUTE = 60_000
T0 = 1_796_000_000_000 - 1_796_000_000_000 % 3_600_000  # an hour start
DAY = 86_400_000


def task(task_id: str = "job", cron: str = "* * * * *", **fields: object) -> TaskDefinition:
    return TaskDefinition(**{"id": task_id, "name": task_id, "cron": cron, "revision": 3, **fields})  # type: ignore[arg-type]


def test_every_minute_of_the_gap_is_missed_with_its_own_occurrence_id() -> None:
    plan = plan_gap([task()], T0 + MINUTE, T0 + 4 * MINUTE, T0 + 5 * MINUTE + 10, DAY)
    minutes = [T0 + m * MINUTE for m in range(1, 5)]
    assert [m.request.scheduled_minute for m in plan.missed] == minutes
    assert [m.request.occurrence_id for m in plan.missed] == [cron_occurrence_id("job", m) for m in minutes]
    assert {(m.reason, m.request.trigger, m.request.task_revision) for m in plan.missed} == {
        ("no_node_running", Trigger.CRON, 3)}
    assert plan.catchup == []


def test_only_the_minutes_the_schedule_fires_at_and_nothing_before_the_lookback() -> None:
    hourly = task(cron="0 * * * *")
    plan = plan_gap([hourly], T0 - 10 * 3_600_000, T0, T0 + MINUTE, lookback_ms=3 * 3_600_000)
    assert [m.request.scheduled_minute for m in plan.missed] == [T0 - 2 * 3_600_000, T0 - 3_600_000, T0]


def test_a_long_gap_keeps_the_recent_minutes_and_sums_up_the_older_ones() -> None:
    plan = plan_gap([task()], T0, T0 + 199 * MINUTE, T0 + 200 * MINUTE, DAY)
    summary, *recent = plan.missed
    assert len(plan.missed) == ROWS_PER_TASK
    assert (summary.request.scheduled_minute, summary.until, summary.count) == (
        T0, T0 + (200 - ROWS_PER_TASK) * MINUTE, 200 - ROWS_PER_TASK + 1)
    assert summary.request.occurrence_id == cron_occurrence_id("job", T0)
    first_recent = 200 - ROWS_PER_TASK + 1
    assert [m.request.scheduled_minute for m in recent] == [T0 + m * MINUTE for m in range(first_recent, 200)]
    assert summary.count + len(recent) == 200  # every minute counted once


def test_catch_up_latest_runs_the_most_recent_minute_inside_its_window() -> None:
    latest = task(catchup=CatchupPolicy("latest", window_ms=3 * MINUTE))
    plan = plan_gap([latest], T0 + MINUTE, T0 + 9 * MINUTE, T0 + 10 * MINUTE, DAY)
    assert [(r.scheduled_minute, r.trigger) for r in plan.catchup] == [(T0 + 9 * MINUTE, Trigger.CATCHUP)]
    assert plan.catchup[0].occurrence_id == cron_occurrence_id("job", T0 + 9 * MINUTE)
    assert [m.request.scheduled_minute for m in plan.missed] == [T0 + m * MINUTE for m in range(1, 9)]


def test_catch_up_all_runs_every_minute_inside_its_window_in_order() -> None:
    every = task(catchup=CatchupPolicy("all", window_ms=3 * MINUTE))
    plan = plan_gap([every], T0 + MINUTE, T0 + 9 * MINUTE, T0 + 10 * MINUTE, DAY)
    assert [r.scheduled_minute for r in plan.catchup] == [T0 + m * MINUTE for m in (7, 8, 9)]
    assert [m.request.scheduled_minute for m in plan.missed] == [T0 + m * MINUTE for m in range(1, 7)]


def test_a_window_the_gap_ends_before_catches_nothing_up() -> None:
    late = task(catchup=CatchupPolicy("latest", window_ms=MINUTE))
    plan = plan_gap([late], T0 + MINUTE, T0 + 3 * MINUTE, T0 + 10 * MINUTE, DAY)
    assert plan.catchup == [] and len(plan.missed) == 3


def test_disabled_paused_and_not_yet_created_minutes_are_not_missed() -> None:
    tasks = [task("off", enabled=False),
             task("young", created_at=T0 + 3 * MINUTE + 1),
             task("paused", paused=Pause(at=T0 + 2 * MINUTE, until=T0 + 4 * MINUTE, by="ops", reason="deploy"))]
    plan = plan_gap(tasks, T0 + MINUTE, T0 + 5 * MINUTE, T0 + 6 * MINUTE, DAY)
    missed = sorted((m.request.task_id, (m.request.scheduled_minute - T0) // MINUTE) for m in plan.missed)
    assert missed == [("paused", 1), ("paused", 4), ("paused", 5), ("young", 4), ("young", 5)]
