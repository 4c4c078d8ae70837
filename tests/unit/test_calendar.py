"""A task's calendar (``task_policies.Calendar``): the window's ends, dates and cron exclusions
read on the task's wall clock (both passes of a repeated hour), the look-ahead that skips excluded
days, a definition changed under a claimed minute, and every bad value refused by name."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.model import Execution, TaskDefinition, validate_task
from scheduler_core.runtime.planner import Planner, definition_problem
from scheduler_core.statuses import ExecutionStatus, Trigger
from scheduler_core.task_policies import EXCLUDE_MAX, Calendar

MINUTE = 60_000


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)  # type: ignore[misc]


def test_the_window_includes_its_start_and_not_its_end() -> None:
    calendar = Calendar(active_from_ms=ms(2027, 1, 1, 9, 0), active_until_ms=ms(2027, 1, 1, 9, 2))
    assert [calendar.allows(ms(2027, 1, 1, 8, 59) + i * MINUTE, "UTC") for i in range(4)] == [False, True, True, False]
    assert Calendar(active_from_ms=ms(2027, 1, 1, 8, 59, 30)).allows(ms(2027, 1, 1, 8, 59), "UTC") is False


def test_an_excluded_date_is_the_whole_day_on_the_tasks_wall_clock() -> None:
    calendar = Calendar(exclude=("2026-12-25",))
    # Tokyo is UTC+9: its 25 December runs from 24 Dec 15:00 UTC to 25 Dec 15:00 UTC
    assert calendar.allows(ms(2026, 12, 24, 14, 59), "Asia/Tokyo")
    assert not calendar.allows(ms(2026, 12, 24, 15, 0), "Asia/Tokyo")
    assert not calendar.allows(ms(2026, 12, 25, 14, 59), "Asia/Tokyo")
    assert calendar.allows(ms(2026, 12, 25, 15, 0), "Asia/Tokyo")
    assert not calendar.allows(ms(2026, 12, 25, 15, 0), "UTC")


def test_a_cron_exclusion_names_wall_minutes_in_both_passes_of_a_repeated_hour() -> None:
    calendar = Calendar(exclude=("* 2 * * *",))
    # Berlin, 25 Oct 2026: 02:00-02:59 CEST is 00:00-00:59 UTC, 02:00-02:59 CET is 01:00-01:59 UTC
    assert not calendar.allows(ms(2026, 10, 25, 0, 30), "Europe/Berlin")
    assert not calendar.allows(ms(2026, 10, 25, 1, 30), "Europe/Berlin")
    assert calendar.allows(ms(2026, 10, 25, 2, 0), "Europe/Berlin")  # 03:00 CET
    assert calendar.allows(ms(2026, 10, 24, 23, 59), "Europe/Berlin")  # 01:59 CEST


def test_the_look_ahead_skips_excluded_days_and_stops_at_the_windows_end() -> None:
    calendar = Calendar(active_until_ms=ms(2027, 1, 2), exclude=("2026-12-25", "* * * * 6,0"))
    found = calendar.upcoming("0 9 * * *", "Europe/Berlin", ms(2026, 12, 23), 10)
    days = [datetime.fromtimestamp(m / 1000, UTC).strftime("%m-%d %H:%M") for m in found]
    # 25 Dec (a Friday) excluded, 26-27 a weekend, the window ends on 2 Jan 00:00 UTC
    assert days == ["12-23 08:00", "12-24 08:00", "12-28 08:00", "12-29 08:00", "12-30 08:00", "12-31 08:00",
                    "01-01 08:00"]
    every_minute = Calendar(exclude=tuple(f"2027-01-{day:02d}" for day in range(1, 31)))
    assert every_minute.upcoming("* * * * *", "UTC", ms(2026, 12, 31, 23, 58), 2) == [
        ms(2026, 12, 31, 23, 59), ms(2027, 1, 31, 0, 0)]  # 30 excluded days of minutes, skipped a day at a time
    assert Calendar(exclude=("* * * * *",)).upcoming("* * * * *", "UTC", 0, 3) == []  # nothing left: no search on
    assert Calendar(active_from_ms=ms(2030, 1, 1)).upcoming("0 0 * * *", "UTC", 0, 1) == [ms(2030, 1, 1)]


def test_a_task_without_a_calendar_is_due_whenever_its_cron_fires() -> None:
    task = TaskDefinition(id="t", name="T", cron="*/5 * * * *")
    assert task.due_at(ms(2027, 1, 1, 0, 0)) and task.upcoming(ms(2027, 1, 1), 2) == [
        ms(2027, 1, 1, 0, 5), ms(2027, 1, 1, 0, 10)]


def test_the_planner_passes_over_an_excluded_minute() -> None:
    task = replace(validate_task(TaskDefinition(id="t", name="T", cron="* * * * *",
                                                calendar={"exclude": ["0 9 * * *"]})), revision=1)
    planner = Planner()
    planner.sync({"t": task}, ms(2027, 1, 1, 8, 59))
    assert [d.minute_ms for d in planner.due(ms(2027, 1, 1, 8, 59))] == [ms(2027, 1, 1, 8, 59)]
    assert planner.due(ms(2027, 1, 1, 9, 0)) == []
    assert [d.minute_ms for d in planner.due(ms(2027, 1, 1, 9, 1))] == [ms(2027, 1, 1, 9, 1)]


def _claimed(minute: int, revision: int) -> Execution:
    return Execution(occurrence_id="o", task_id="t", task_revision=revision, trigger=Trigger.CRON, source=None,
                     idempotency_key=None, scheduled_minute=minute, status=ExecutionStatus.RUNNING, reason=None,
                     sequence=1, attempt=0, max_attempts=1, execution_token="x", owner_node="n", lease_until=None,
                     attempts=(), log_persistence=None, resolved_by=None, resolution_reason=None, created_at=minute,
                     updated_at=minute)


def test_a_claimed_minute_the_changed_calendar_excludes_is_rescheduled() -> None:
    minute = ms(2027, 1, 1, 9, 0)
    task = TaskDefinition(id="t", name="T", cron="* * * * *", revision=2)
    assert definition_problem(_claimed(minute, 1), task) is None
    excluded = replace(task, calendar=Calendar(exclude=("2027-01-01",)))
    assert definition_problem(_claimed(minute, 1), excluded) == "rescheduled"
    assert definition_problem(_claimed(minute, 2), excluded) is None  # the revision it was claimed at


@pytest.mark.parametrize(("value", "field", "words"), [
    ({"active_from_ms": 2000, "active_until_ms": 1000}, "calendar.active_until_ms", "the window ends before it starts"),
    ({"active_from_ms": 1000, "active_until_ms": 1000}, "calendar.active_until_ms", "the window ends before it starts"),
    ({"active_from_ms": -1}, "calendar.active_from_ms", "unix milliseconds"),
    ({"active_until_ms": "tomorrow"}, "calendar.active_until_ms", "unix milliseconds"),
    ({"active_from_ms": True}, "calendar.active_from_ms", "unix milliseconds"),
    ({"exclude": "2026-12-25"}, "calendar.exclude", "must be a list"),
    ({"exclude": ["2026-02-30"]}, "calendar.exclude[0]", "is not a date"),
    ({"exclude": ["2026-12-25", "25.12.2026"]}, "calendar.exclude[1]", "neither a date (YYYY-MM-DD) nor a cron"),
    ({"exclude": ["61 * * * *"]}, "calendar.exclude[0]", "neither a date"),
    ({"exclude": [7]}, "calendar.exclude[0]", "must be a date (YYYY-MM-DD) or a cron expression"),
    ({"exclude": ["2026-12-25"] * (EXCLUDE_MAX + 1)}, "calendar.exclude", f"at most {EXCLUDE_MAX}"),
    ({"holidays": []}, "calendar.holidays", "is not a calendar setting"),
])
def test_each_bad_calendar_is_refused_naming_its_field(value: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_task(TaskDefinition(id="t", name="T", cron="* * * * *", calendar=value))  # type: ignore[arg-type]
    assert caught.value.field == field and words in caught.value.message


def test_exclusions_are_kept_normalised_and_in_order() -> None:
    calendar = Calendar(exclude=[" 2026-12-25 ", "0  9 * * 1", "@DAILY"])  # type: ignore[arg-type]
    assert calendar.exclude == ("2026-12-25", "0 9 * * 1", "@daily")
    assert Calendar.parse(calendar.to_json()) == calendar


def test_passing_over_an_excluded_day_or_hour_lands_on_the_next_one_across_spring_forward() -> None:
    # Berlin, 28 Mar 2027: 02:00 CET becomes 03:00 CEST at 01:00 UTC; that wall day is 23 hours long
    day = Calendar(exclude=("2027-03-28",))
    assert day.upcoming("0 * * * *", "Europe/Berlin", ms(2027, 3, 27, 22, 30), 1) == [
        ms(2027, 3, 28, 22, 0)]  # 00:00 CEST on the 29th
    hour = Calendar(exclude=("* 1 * * *",))  # wall 01:xx; 02:xx does not exist that day
    assert hour.upcoming("*/15 * * * *", "Europe/Berlin", ms(2027, 3, 27, 23, 50), 2) == [
        ms(2027, 3, 28, 1, 0), ms(2027, 3, 28, 1, 15)]  # 03:00 and 03:15 CEST
