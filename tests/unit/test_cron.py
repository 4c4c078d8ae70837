"""cron.py: validation, fire minutes across DST transitions, deterministic occurrence ids.

Fire times are checked three ways: hand-computed expectations for the documented DST
promises, exact fire counts per local day, and a brute-force reference that applies the
rules minute by minute (see ``reference_fires``) and shares no code with the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core.cron import (
    MAX_UPCOMING,
    cron_occurrence_id,
    fires_at,
    manual_occurrence_id,
    new_occurrence_id,
    next_fire_ms,
    upcoming,
    validate_cron,
    validate_timezone,
)
from scheduler_core.errors import ConfigError, InvalidCronError

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BERLIN, NEW_YORK, LORD_HOWE = "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"
ZONES = ("UTC", BERLIN, NEW_YORK, LORD_HOWE)
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *"}
REPO_ROOT = Path(__file__).resolve().parents[2]


# --- helpers ------------------------------------------------------------------------


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def local(tz: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0, fold: int = 0) -> int:
    wall = datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz), fold=fold)
    return int(wall.timestamp() * 1000)


def wall_of(zone: ZoneInfo, instant_ms: int) -> datetime:
    return (EPOCH + timedelta(milliseconds=instant_ms)).astimezone(zone).replace(tzinfo=None, fold=0)


def fires_between(expr: str, tz: str, start_ms: int, end_ms: int) -> list[int]:
    """Fire minutes in [start_ms, end_ms), by iterating next_fire_ms."""
    fires: list[int] = []
    cursor = next_fire_ms(expr, tz, start_ms - 1)
    while cursor < end_ms:
        fires.append(cursor)
        cursor = next_fire_ms(expr, tz, cursor)
    return fires


def local_day(tz: str, year: int, month: int, day: int) -> list[int]:
    start = local(tz, year, month, day)
    following = datetime(year, month, day) + timedelta(days=1)
    return [start, local(tz, following.year, following.month, following.day)]


def fires_on_local_day(expr: str, tz: str, year: int, month: int, day: int) -> list[int]:
    start, end = local_day(tz, year, month, day)
    return fires_between(expr, tz, start, end)


def matching_walls(expr: str, first: datetime, last: datetime) -> set[datetime]:
    """Every naive wall minute in [first, last] the expression matches, straight from croniter."""
    walls: set[datetime] = set()
    it = croniter(MACROS.get(expr, expr), first - timedelta(minutes=1))
    while (wall := it.get_next(datetime)) <= last:
        walls.add(wall)
    return walls


def reference_fires(expr: str, tz: str, start_ms: int, end_ms: int) -> list[int]:
    """Brute force from the documented rules, one real UTC minute at a time.

    Elapsed-time schedules (hour field starting with ``*``) fire at a minute whose wall
    time matches. Wall-clock schedules fire at a matching minute only in its first pass,
    plus at the first minute after a gap if any wall minute the gap skipped matches.
    """
    zone = ZoneInfo(tz)
    wall_clock = not MACROS.get(expr, expr).split()[1].startswith("*")
    minutes = range(start_ms, end_ms, MIN)
    walls = [wall_of(zone, start_ms - MIN)] + [wall_of(zone, m) for m in minutes]
    matches = matching_walls(expr, min(walls), max(walls))
    fires = []
    for index, minute in enumerate(minutes):
        previous, wall = walls[index], walls[index + 1]
        if not wall_clock:
            fire = wall in matches
        else:
            first_pass = int(wall.replace(tzinfo=zone).timestamp() * 1000) == minute
            skipped = (previous + timedelta(minutes=k) for k in range(1, (wall - previous) // timedelta(minutes=1)))
            fire = (wall in matches and first_pass) or any(w in matches for w in skipped)
        if fire:
            fires.append(minute)
    return fires


def transitions(tz: str, year: int) -> list[tuple[int, int, int]]:
    """(instant ms, offset before, offset after in minutes) of every offset change in a year."""
    zone = ZoneInfo(tz)

    def offset(ms: int) -> int:
        delta = (EPOCH + timedelta(milliseconds=ms)).astimezone(zone).utcoffset()
        assert delta is not None
        return int(delta.total_seconds()) // 60

    found = []
    day = utc(year, 1, 1)
    while day < utc(year + 1, 1, 1):
        if offset(day) != offset(day + DAY):
            low, high = day, day + DAY  # offset(low) is the old one, offset(high) the new
            while high - low > MIN:
                middle = (low + high) // 2 // MIN * MIN
                low, high = (middle, high) if offset(middle) == offset(day) else (low, middle)
            found.append((high, offset(low), offset(high)))
        day += DAY
    return found


# --- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("*/15 * * * *", "*/15 * * * *"),
        ("  */15  *\t* *   *\n", "*/15 * * * *"),
        ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 0 29 2 *", "0 0 29 2 *"),
        ("@daily", "@daily"),
        (" @HOURLY ", "@hourly"),
        ("@yearly", "@yearly"),
        ("5-5 * * * *", "5 * * * *"),  # croniter would read a one-value minute range as every minute
        ("5-5/2,7 3-3 * * mon-MON", "5,7 3 * * mon"),
    ],
)
def test_validate_cron_normalises(raw: str, normalised: str) -> None:
    assert validate_cron(raw) == normalised
    assert validate_cron(normalised) == normalised


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "* * * *",
        "* * * * * *",  # croniter would read a sixth field as seconds
        "0 0 1 1 * 2030",
        "60 * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "0 0 * * 8",
        "*/0 * * * *",
        "1,2, * * * *",
        "foo bar baz qux quux",
        "H * * * *",
        "0 0 30 2 *",  # never fires
        "0 0 31 2,4 *",
        "@reboot",
        "@every 5m",
    ],
)
def test_validate_cron_refuses_bad_expressions(raw: str) -> None:
    with pytest.raises(InvalidCronError) as info:
        validate_cron(raw)
    assert info.value.code == "hai:scheduler:022"
    assert str(info.value).startswith("hai:scheduler:022 cron: ")
    if raw.strip():
        assert repr(raw) in str(info.value)


@pytest.mark.parametrize("raw", [None, 5, b"* * * * *", ["*"] * 5])
def test_validate_cron_refuses_non_strings(raw: object) -> None:
    with pytest.raises(InvalidCronError, match="cron: expected a string"):
        validate_cron(raw)  # type: ignore[arg-type]


def test_validate_cron_refuses_overlong_expressions() -> None:
    with pytest.raises(InvalidCronError, match="cron: expression longer than 255"):
        validate_cron("0 0 * * " + ",".join(["1"] * 200))


@pytest.mark.parametrize(("raw", "name"), [(None, "UTC"), ("", "UTC"), ("UTC", "UTC"), (BERLIN, BERLIN)])
def test_validate_timezone_accepts_iana_names(raw: str | None, name: str) -> None:
    assert validate_timezone(raw) == name


@pytest.mark.parametrize(
    "raw",
    [
        "local",
        "localtime",  # would follow the host's /etc/localtime
        "posixrules",
        "/etc/localtime",
        "../etc/passwd",
        "Europe",
        "europe/berlin",
        "Europe/Berlin ",
        "right/UTC",
        "Mars/Olympus_Mons",
        "Europe/Berlin\x00",
        "x" * 300,
    ],
)
def test_validate_timezone_refuses_non_zones(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_timezone(raw)
    assert info.value.code == "hai:scheduler:012"
    assert info.value.field == "timezone"
    assert repr(raw)[:40] in str(info.value)


@pytest.mark.parametrize("raw", [5, b"UTC", ["UTC"]])
def test_validate_timezone_refuses_non_strings(raw: object) -> None:
    with pytest.raises(ConfigError, match="timezone: expected an IANA time zone name"):
        validate_timezone(raw)  # type: ignore[arg-type]


def test_fire_functions_validate_their_inputs() -> None:
    with pytest.raises(InvalidCronError):
        next_fire_ms("* * * * * *", "UTC", 0)
    with pytest.raises(ConfigError):
        next_fire_ms("* * * * *", "Nowhere/Special", 0)
    with pytest.raises(TypeError):
        next_fire_ms("* * * * *", "UTC", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        next_fire_ms("* * * * *", "UTC", True)
    with pytest.raises(ValueError, match="minute start"):
        fires_at("* * * * *", "UTC", 30_000)
    with pytest.raises(ValueError, match="count"):
        upcoming("* * * * *", "UTC", 0, MAX_UPCOMING + 1)


# --- UTC basics ---------------------------------------------------------------------


def test_strictly_after_and_minute_aligned() -> None:
    start = utc(2026, 1, 1)
    assert next_fire_ms("*/15 * * * *", "UTC", start - 1) == start
    assert next_fire_ms("*/15 * * * *", "UTC", start) == start + 15 * MIN
    assert next_fire_ms("*/15 * * * *", "UTC", start + 1) == start + 15 * MIN
    assert next_fire_ms("*/15 * * * *", "UTC", start + 15 * MIN - 1) == start + 15 * MIN
    assert next_fire_ms("* * * * *", "UTC", start + 59_999) == start + MIN
    assert next_fire_ms("* * * * *", "", start) == start + MIN  # "" means UTC


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 9 * * *", utc(2026, 1, 1, 9), utc(2026, 1, 2, 9)),
        ("0 9 * * *", utc(2026, 1, 1, 8, 59), utc(2026, 1, 1, 9)),
        ("0 9 * * 1-5", utc(2026, 1, 2, 9), utc(2026, 1, 5, 9)),  # Friday -> Monday
        ("0 9 * * MON-FRI", utc(2026, 1, 3), utc(2026, 1, 5, 9)),
        ("30 23 31 * *", utc(2026, 1, 31, 23, 30), utc(2026, 3, 31, 23, 30)),  # Feb has no 31st
        ("0 0 L * *", utc(2026, 1, 31), utc(2026, 2, 28)),
        ("0 0 29 2 *", utc(2026, 1, 1), utc(2028, 2, 29)),
        ("0 0 29 2 *", utc(2097, 3, 1), utc(2104, 2, 29)),  # 2100 is no leap year
        ("0 0 13 * 5", utc(2026, 2, 7), utc(2026, 2, 13)),  # Friday the 13th
        ("0 0 13 * 5", utc(2026, 2, 13), utc(2026, 2, 20)),  # both fields set: OR
        ("0 0 * * 5#3", utc(2026, 1, 1), utc(2026, 1, 16)),
        ("@monthly", utc(2026, 1, 15), utc(2026, 2, 1)),
        ("@yearly", utc(2026, 1, 1), utc(2027, 1, 1)),
    ],
)
def test_utc_schedules(expr: str, after: int, expected: int) -> None:
    assert next_fire_ms(expr, "UTC", after) == expected


def test_upcoming_and_fires_at() -> None:
    start = utc(2026, 1, 1)
    assert upcoming("*/15 * * * *", "UTC", start, 4) == [start + k * 15 * MIN for k in (1, 2, 3, 4)]
    assert upcoming("*/15 * * * *", "UTC", start, 0) == []
    assert fires_at("*/15 * * * *", "UTC", start + 15 * MIN)
    assert not fires_at("*/15 * * * *", "UTC", start + 16 * MIN)


def test_time_zone_is_applied() -> None:
    assert next_fire_ms("0 9 * * *", "Asia/Tokyo", utc(2025, 12, 31, 12)) == utc(2026, 1, 1, 0)
    assert next_fire_ms("0 9 * * *", NEW_YORK, utc(2026, 1, 1)) == utc(2026, 1, 1, 14)
    assert next_fire_ms("0 9 * * *", NEW_YORK, utc(2026, 7, 1)) == utc(2026, 7, 1, 13)


def test_historic_offsets_with_seconds_still_give_minute_starts() -> None:
    # Africa/Monrovia kept -00:44:30 until 1972: 12:00 there began at 12:44:30 UTC.
    fire = next_fire_ms("0 12 * * *", "Africa/Monrovia", utc(1971, 6, 1))
    assert fire == utc(1971, 6, 1, 12, 45)


# --- DST ----------------------------------------------------------------------------


def test_transition_dates_2026() -> None:
    # The dates every DST test below relies on, checked against the zone database.
    assert transitions(BERLIN, 2026) == [(utc(2026, 3, 29, 1), 60, 120), (utc(2026, 10, 25, 1), 120, 60)]
    assert transitions(NEW_YORK, 2026) == [(utc(2026, 3, 8, 7), -300, -240), (utc(2026, 11, 1, 6), -240, -300)]
    assert transitions(LORD_HOWE, 2026) == [(utc(2026, 4, 4, 15), 660, 630), (utc(2026, 10, 3, 15, 30), 630, 660)]


@pytest.mark.parametrize(
    ("tz", "expr", "day", "expected"),
    [
        # Spring forward: a wall time inside the gap fires at the first minute after it.
        (BERLIN, "30 2 * * *", (2026, 3, 28), [utc(2026, 3, 28, 1, 30)]),
        (BERLIN, "30 2 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1)]),  # 03:00 CEST
        (BERLIN, "30 2 * * *", (2026, 3, 30), [utc(2026, 3, 30, 0, 30)]),
        (BERLIN, "0 2,3 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1)]),  # 02:00 and 03:00 collapse
        (BERLIN, "0,30 2 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1)]),
        (BERLIN, "30 2,3 * * *", (2026, 3, 29), [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)]),
        (NEW_YORK, "30 2 * * *", (2026, 3, 8), [utc(2026, 3, 8, 7)]),  # 03:00 EDT
        (NEW_YORK, "30 2 * * *", (2026, 3, 9), [utc(2026, 3, 9, 6, 30)]),
        (LORD_HOWE, "15 2 * * *", (2026, 10, 4), [utc(2026, 10, 3, 15, 30)]),  # 02:30 +11
        (LORD_HOWE, "0 2 * * *", (2026, 10, 4), [utc(2026, 10, 3, 15, 30)]),
        (LORD_HOWE, "30 2 * * *", (2026, 10, 4), [utc(2026, 10, 3, 15, 30)]),  # exists: just 02:30
        # Fall back: a repeated wall time fires in its first pass only.
        (BERLIN, "30 2 * * *", (2026, 10, 24), [utc(2026, 10, 24, 0, 30)]),
        (BERLIN, "30 2 * * *", (2026, 10, 25), [utc(2026, 10, 25, 0, 30)]),  # 02:30 CEST, not CET
        (BERLIN, "30 2 * * *", (2026, 10, 26), [utc(2026, 10, 26, 1, 30)]),
        (NEW_YORK, "30 1 * * *", (2026, 11, 1), [utc(2026, 11, 1, 5, 30)]),  # 01:30 EDT, not EST
        (LORD_HOWE, "45 1 * * *", (2026, 4, 5), [utc(2026, 4, 4, 14, 45)]),  # 01:45 +11, not +10:30
        (LORD_HOWE, "0 2 * * *", (2026, 4, 5), [utc(2026, 4, 4, 15, 30)]),
    ],
)
def test_wall_clock_schedules_across_transitions(
    tz: str, expr: str, day: tuple[int, int, int], expected: list[int]
) -> None:
    assert fires_on_local_day(expr, tz, *day) == expected


@pytest.mark.parametrize(
    ("tz", "expr", "day", "count"),
    [
        (BERLIN, "0 * * * *", (2026, 3, 29), 23),
        (BERLIN, "0 * * * *", (2026, 10, 25), 25),
        (BERLIN, "@hourly", (2026, 10, 25), 25),
        (BERLIN, "*/15 * * * *", (2026, 3, 29), 92),
        (BERLIN, "*/15 * * * *", (2026, 10, 25), 100),
        (BERLIN, "0 * * * *", (2026, 10, 26), 24),
        (NEW_YORK, "0 * * * *", (2026, 3, 8), 23),
        (NEW_YORK, "0 * * * *", (2026, 11, 1), 25),
        (NEW_YORK, "*/15 * * * *", (2026, 11, 1), 100),
        # Lord Howe shifts by 30 minutes: 23.5 and 24.5 hour days.
        (LORD_HOWE, "0 * * * *", (2026, 10, 4), 23),  # 02:00 is skipped
        (LORD_HOWE, "30 * * * *", (2026, 10, 4), 24),  # 02:30 exists
        (LORD_HOWE, "*/15 * * * *", (2026, 10, 4), 94),
        (LORD_HOWE, "0 * * * *", (2026, 4, 5), 24),  # only 01:30-01:59 repeats
        (LORD_HOWE, "30 * * * *", (2026, 4, 5), 25),  # 01:30 twice
        (LORD_HOWE, "*/15 * * * *", (2026, 4, 5), 98),
        # Wall-clock schedules: once per matching wall minute, whatever the day's length.
        (BERLIN, "* 2 * * *", (2026, 3, 29), 1),
        (BERLIN, "* 2 * * *", (2026, 10, 25), 60),
        (BERLIN, "0 0-23 * * *", (2026, 3, 29), 23),  # 02:00 and 03:00 collapse into one
        (BERLIN, "0 0-23 * * *", (2026, 10, 25), 24),
        (LORD_HOWE, "*/15 0-23 * * *", (2026, 4, 5), 96),
    ],
)
def test_fires_per_local_day(tz: str, expr: str, day: tuple[int, int, int], count: int) -> None:
    assert len(fires_on_local_day(expr, tz, *day)) == count


def test_elapsed_schedule_fires_in_both_passes_and_not_in_the_gap() -> None:
    fall = fires_between("0 * * * *", BERLIN, utc(2026, 10, 24, 23), utc(2026, 10, 25, 3))
    assert fall == [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]
    assert [wall_of(ZoneInfo(BERLIN), t).hour for t in fall] == [1, 2, 2, 3]
    spring = fires_between("*/30 * * * *", BERLIN, utc(2026, 3, 29, 0), utc(2026, 3, 29, 2))
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)]
    assert [wall_of(ZoneInfo(BERLIN), t).strftime("%H:%M") for t in spring] == ["01:00", "01:30", "03:00", "03:30"]


@pytest.mark.parametrize("after", [utc(2026, 10, 25, 0, 10), utc(2026, 10, 25, 0, 59), utc(2026, 10, 25, 1, 20)])
def test_starting_inside_the_repeated_hour(after: int) -> None:
    # From inside either pass, an elapsed-time schedule still owes the second pass;
    # a wall-clock one already ran in the first.
    zone = ZoneInfo(BERLIN)
    second_pass_0230 = local(BERLIN, 2026, 10, 25, 2, 30, fold=1)
    expected_elapsed = next(t for t in (utc(2026, 10, 25, 0, 30), second_pass_0230) if t > after)
    assert next_fire_ms("30 * * * *", BERLIN, after) == expected_elapsed
    wall_clock = next_fire_ms("30 2 * * *", BERLIN, after)
    expected_wall = utc(2026, 10, 25, 0, 30) if after < utc(2026, 10, 25, 0, 30) else utc(2026, 10, 26, 1, 30)
    assert wall_clock == expected_wall, wall_of(zone, wall_clock)


REFERENCE_EXPRESSIONS = [
    "*/15 * * * *",
    "0 * * * *",
    "30 * * * *",
    "*/7 */2 * * *",
    "@hourly",
    "30 2 * * *",
    "0 2 * * *",
    "45 1 * * *",
    "0,30 1-3 * * *",
    "* 2 * * *",
    "*/10 0-23 * * *",
    "@daily",
]
TRANSITIONS = [(tz, t) for tz in (BERLIN, NEW_YORK, LORD_HOWE) for t, _, _ in transitions(tz, 2026)]


@pytest.mark.parametrize(("tz", "transition"), TRANSITIONS)
def test_matches_the_brute_force_reference_around_transitions(tz: str, transition: int) -> None:
    start, end = transition - 15 * HOUR, transition + 15 * HOUR
    for expr in REFERENCE_EXPRESSIONS:
        assert fires_between(expr, tz, start, end) == reference_fires(expr, tz, start, end), expr


# --- properties ---------------------------------------------------------------------

NEAR_TRANSITIONS = [t for tz in ZONES[1:] for year in (2025, 2026, 2027) for t, _, _ in transitions(tz, year)]
POOL = [
    *REFERENCE_EXPRESSIONS,
    "0 9 * * 1-5",
    "15 3 * * *",
    "0 */3 * * *",
    "*/20 1,2 * * 0",
    "0 12 1 * *",
    "0 0 L * *",
    "5 4 * * sun",
]
after_times = st.one_of(
    st.integers(utc(2025, 1, 1), utc(2027, 12, 31)),
    st.builds(lambda t, d: t + d, st.sampled_from(NEAR_TRANSITIONS), st.integers(-2 * DAY, 2 * DAY)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=st.sampled_from(POOL), tz=st.sampled_from(ZONES), after=after_times)
def test_next_fire_is_the_first_fire_after(expr: str, tz: str, after: int) -> None:
    fire = next_fire_ms(expr, tz, after)
    assert fire > after
    assert fire % MIN == 0
    assert fires_at(expr, tz, fire)
    # Nothing fires between `after` and `fire` (checked over the last 12 h before `fire`),
    # and the reference agrees that `fire` fires.
    window_start = max(after - after % MIN + MIN, fire - 12 * HOUR)
    assert reference_fires(expr, tz, window_start, fire + MIN) == [fire]


# --- concurrency --------------------------------------------------------------------


def test_concurrent_calls_share_the_cached_parser_safely() -> None:
    starts = [utc(2026, 10, 24) + k * 7 * MIN for k in range(300)]
    expected = [next_fire_ms("*/5 * * * *", BERLIN, s) for s in starts]
    results: list[list[int]] = []

    def work() -> None:
        results.append([next_fire_ms("*/5 * * * *", BERLIN, s) for s in starts])

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 6


# --- occurrence ids -----------------------------------------------------------------


def test_occurrence_ids_are_deterministic_and_distinct() -> None:
    minute = utc(2026, 1, 1)
    first = cron_occurrence_id("task-1", minute)
    assert first == cron_occurrence_id("task-1", minute)
    assert len(first) == 36 and uuid.UUID(first).version == 5
    ids = {
        first,
        cron_occurrence_id("task-1", minute + MIN),
        cron_occurrence_id("task-2", minute),
        manual_occurrence_id("task-1", str(minute)),
        manual_occurrence_id("task-1", "key-a"),
        manual_occurrence_id("task-1", "key-b"),
        manual_occurrence_id("task-2", "key-a"),
    }
    assert len(ids) == 7
    assert manual_occurrence_id("task-1", "key-a") == manual_occurrence_id("task-1", "key-a")


def test_occurrence_ids_are_pinned() -> None:
    # Changing the namespace or the hashed text would re-run every minute during an upgrade.
    assert cron_occurrence_id("task-1", 1_767_225_600_000) == "e52efbaa-3135-5e25-af56-53d600775a46"
    assert manual_occurrence_id("task-1", "key-a") == "eafbd2f6-8b85-5906-b079-e0aab499f9f1"


def test_new_occurrence_ids_are_random_uuid4() -> None:
    a, b = new_occurrence_id(), new_occurrence_id()
    assert a != b and uuid.UUID(a).version == 4 and len(a) == 36


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: cron_occurrence_id("", 0), ValueError),
        (lambda: cron_occurrence_id("a\x00b", 0), ValueError),
        (lambda: cron_occurrence_id("task", 30_000), ValueError),
        (lambda: cron_occurrence_id("task", 1.0), TypeError),  # type: ignore[arg-type]
        (lambda: cron_occurrence_id(7, 0), TypeError),  # type: ignore[arg-type]
        (lambda: manual_occurrence_id("task", ""), ValueError),
        (lambda: manual_occurrence_id("task", "a\x00b"), ValueError),
        (lambda: manual_occurrence_id("task", "\ud800"), ValueError),
    ],
)
def test_occurrence_ids_refuse_ambiguous_inputs(call: Callable[[], str], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


def test_ids_and_fire_times_do_not_depend_on_the_process_time_zone() -> None:
    script = (
        "import json; from scheduler_core.cron import cron_occurrence_id, manual_occurrence_id, next_fire_ms; "
        "print(json.dumps([cron_occurrence_id('task-1', 1767225600000), manual_occurrence_id('task-1', 'k'), "
        "next_fire_ms('30 2 * * *', 'Europe/Berlin', 1774656000000), next_fire_ms('0 9 * * *', 'UTC', 0)]))"
    )
    here = [
        cron_occurrence_id("task-1", 1767225600000),
        manual_occurrence_id("task-1", "k"),
        next_fire_ms("30 2 * * *", BERLIN, 1774656000000),
        next_fire_ms("0 9 * * *", "UTC", 0),
    ]
    for tz in ("Asia/Tokyo", "America/Los_Angeles"):
        output = subprocess.run(
            [sys.executable, "-c", script],
            cwd=REPO_ROOT,
            env={"TZ": tz, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert json.loads(output) == here


def test_a_one_value_minute_range_fires_at_that_minute_only() -> None:
    start = 1796004000000
    assert upcoming("5-5 * * * *", "UTC", start, 2) == upcoming("5 * * * *", "UTC", start, 2)


@pytest.mark.parametrize(("field", "count"), [(0, 60), (1, 24), (2, 31), (3, 12), (4, 7)])
def test_a_step_may_span_its_whole_field_and_no_more(field: int, count: int) -> None:
    def expr(step: str) -> str:
        fields = ["0", "0", "1", "1", "*"]
        fields[field] = f"*/{step}"
        return " ".join(fields)

    for step in ("1", str(count), f"00{min(count, 9)}"):  # a three-digit step with leading zeros is its number
        assert validate_cron(expr(step)) == expr(step)
    for step in ("0", str(count + 1), "0001"):  # more than three digits is refused before reading it
        with pytest.raises(InvalidCronError, match="step"):
            validate_cron(expr(step))


def test_fire_times_near_the_end_of_the_supported_range() -> None:
    """The walk starts at the minute of ``after_ms``: it does not visit weeks of candidate
    minutes first (which the candidate limit would refuse) however late the date."""
    late = int(datetime(8999, 12, 29, 10, 0, 30, tzinfo=UTC).timestamp() * 1000)
    for zone in ("UTC", "Europe/Berlin", "Asia/Kolkata"):
        assert next_fire_ms("* * * * *", zone, late) == late - 30_000 + MIN
    assert upcoming("*/5 * * * *", "UTC", late, 2) == [late - 30_000 + 5 * MIN, late - 30_000 + 10 * MIN]
