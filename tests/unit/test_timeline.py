"""The timeline's rows (scheduler_core/runtime/timeline.py): which buckets of the window run, are
paused or excluded, across a DST change; filters, pages, and every refused argument named."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.errors import ConfigError
from scheduler_core.model import validate_task
from scheduler_core.runtime.timeline import NO_GROUP, PAGE_ROWS, Mark, timeline
from scheduler_core.task_policies import Pause

UTC = ZoneInfo("UTC")
NOW = int(datetime(2026, 3, 28, 12, 7, tzinfo=UTC).timestamp() * 1000)  # Berlin goes to summer time tomorrow
HOUR = 3_600_000


def _task(task_id: str, cron: str, **fields: object) -> TaskDefinition:
    return validate_task(TaskDefinition(id=task_id, name=task_id.title(), cron=cron, **fields))  # type: ignore[arg-type]


def _line(marks: tuple[Mark, ...]) -> str:
    return "".join({Mark.NONE: ".", Mark.RUNS: "R", Mark.PAUSED: "P", Mark.EXCLUDED: "x"}[m] for m in marks)


def test_a_day_in_half_hours_from_the_current_minute() -> None:
    shown = timeline([_task("hourly", "0 * * * *"), _task("nightly", "30 2 * * *", timezone="Europe/Berlin")], NOW)
    assert (shown.start_ms, shown.hours, shown.buckets) == (NOW - 7 * 60_000, 24, 48)
    rows = {row.task.id: row for row in shown.rows}
    # 12:00 is past (the current minute is 12:07): the first fire is 13:00, in the third bucket
    assert _line(rows["hourly"].marks) == ".." + "R." * 23
    assert rows["hourly"].next_fire_ms == NOW - 7 * 60_000 + HOUR
    # 02:30 in Berlin does not exist on the 29th (02:00 CET -> 03:00 CEST): it fires at the change,
    # 03:00 CEST = 01:00 UTC (docs/semantics.md O6)
    at = int(datetime(2026, 3, 29, 1, 0, tzinfo=UTC).timestamp() * 1000)
    assert rows["nightly"].next_fire_ms == at and _line(rows["nightly"].marks).index("R") == (at - shown.start_ms) // (
        30 * 60_000)


def test_the_skipped_hour_of_a_dst_change_has_no_fire() -> None:
    # Berlin's 02:xx does not exist on 29 March 2026: a task at 02:15 wall time fires at 03:15 (O6), once
    start = int(datetime(2026, 3, 29, 0, 0, tzinfo=UTC).timestamp() * 1000)
    shown = timeline([_task("early", "15 2 * * *", timezone="Europe/Berlin")], start - 3 * HOUR, hours=6,
                     start_ms=start)
    assert _line(shown.rows[0].marks).count("R") == 1


def test_excluded_and_paused_are_shown_as_such() -> None:
    calendar = {"exclude": ["* 14-15 * * *"]}  # 14:00-15:59 UTC
    paused = dataclasses.replace(_task("paused", "0 * * * *"),
                                 paused=Pause(at=NOW, until=NOW - 7 * 60_000 + 4 * HOUR, by="ann", reason="deploy"))
    shown = timeline([_task("calm", "*/10 * * * *", calendar=calendar), paused], NOW, hours=6)
    rows = {row.task.id: row for row in shown.rows}
    # 5-minute buckets from 12:05: every other one holds a fire time; 14:00-15:50 are excluded
    assert _line(rows["calm"].marks) == ".R" * 11 + ".x" * 12 + ".R" * 13
    # hourly, 13:00 is bucket 11: paused until 16:00, so 13:00, 14:00 and 15:00 are paused
    assert _line(rows["paused"].marks) == ("." * 11 + "P") * 3 + ("." * 11 + "R") * 3
    assert rows["paused"].next_fire_ms == NOW - 7 * 60_000 + 4 * HOUR  # the first fire after the pause
    forever = dataclasses.replace(paused, paused=Pause(at=NOW, until=None, by="ann", reason="why"))
    (row,) = timeline([forever], NOW, hours=6).rows
    assert set(_line(row.marks)) == {".", "P"} and row.next_fire_ms is None


def test_an_hour_in_minutes_and_a_later_window() -> None:
    start = NOW - 7 * 60_000 + 24 * HOUR
    shown = timeline([_task("five", "*/5 * * * *")], NOW, hours=1, start_ms=start + 123)
    assert (shown.start_ms, shown.buckets, shown.bucket_ms) == (start, 60, 60_000)
    assert _line(shown.rows[0].marks) == "R...." * 12


def test_groups_search_and_pages() -> None:
    tasks = [_task(f"t{i:03d}", "0 3 * * *", node_group="billing" if i % 2 else None) for i in range(60)]
    tasks.append(dataclasses.replace(_task("off", "* * * * *"), enabled=False))
    everything = timeline(tasks, NOW)
    assert (everything.matched, everything.pages, everything.disabled, everything.groups) == (60, 3, 1, ["", "billing"])
    assert [row.task.node_group for row in everything.rows] == [None] * PAGE_ROWS  # by group, then id
    last = timeline(tasks, NOW, page=3)
    assert [row.task.id for row in last.rows] == [f"t{i:03d}" for i in range(41, 60, 2)]
    assert timeline(tasks, NOW, group="billing").matched == 30
    assert timeline(tasks, NOW, group=NO_GROUP).matched == 30
    found = [row.task.id for row in timeline(tasks, NOW, search="T01").rows]
    assert found == [f"t01{i}" for i in range(0, 10, 2)] + [f"t01{i}" for i in range(1, 10, 2)]  # any node first


@pytest.mark.parametrize(("args", "field"), [
    ({"hours": 5}, "hours"), ({"hours": True}, "hours"), ({"hours": "24"}, "hours"),
    ({"start_ms": NOW - 2 * HOUR}, "start"), ({"start_ms": NOW + 8 * 24 * HOUR}, "start"), ({"start_ms": -1}, "start"),
    ({"page": 0}, "page"), ({"page": 2}, "page"), ({"group": 7}, "group"), ({"search": "x" * 201}, "q"),
])
def test_refused_naming_the_argument(args: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        timeline([_task("a", "0 * * * *")], NOW, **args)  # type: ignore[arg-type]
    assert refused.value.field == field
