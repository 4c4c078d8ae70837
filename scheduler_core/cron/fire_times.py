"""Fire times: the minutes a schedule fires at, in UTC unix ms, across DST transitions.

``next_fire_ms`` walks the expression's matching wall minutes in the task's zone and maps
each to the instant(s) it fires at: a wall-clock schedule (hours named in the hour field) fires once, at the
first pass of a repeated hour and at the end of a skipped one; an elapsed-time schedule
(hour field ``*`` or ``*/n``) fires in both passes and not in a gap. The rules are
in docs/semantics.md ("Occurrences"). Also the checks that an argument is a unix-ms
instant or a minute start in 1900..9000, shared with the occurrence ids.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler_core.cron.expressions import Schedule, parse
from scheduler_core.cron.zones import resolve_zone
from scheduler_core.errors import InvalidCronError

__all__ = ["MAX_UPCOMING", "MINUTE_MS", "check_minute", "check_ms", "dst_note", "fires_at", "matches_wall",
           "next_fire_ms", "upcoming", "wall_minute_ms"]

MINUTE_MS = 60_000
MAX_UPCOMING = 1000  # a dashboard preview, not a bulk export

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)
# Keeps datetime arithmetic and croniter's 50-year search far from datetime's year limits.
_MIN_MS = -2_208_988_800_000  # 1900-01-01T00:00Z
_MAX_MS = 221_845_392_000_000  # 9000-01-01T00:00Z
# next_fire_ms visits at most a few hours of candidate wall minutes around a transition
# (a 24 h gap, as Pacific/Apia 2011, is 1440); more means a bug, not a schedule.
_MAX_CANDIDATES = 10_000


def check_ms(value: int, name: str) -> None:
    """Refuse anything but int unix ms in 1900..9000, naming the argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int unix milliseconds, got {type(value).__name__}")
    if not _MIN_MS <= value <= _MAX_MS:
        raise ValueError(f"{name}={value} is outside 1900..9000")


def check_minute(value: int, name: str) -> None:
    """As :func:`check_ms`, and ``value`` must be a minute start."""
    check_ms(value, name)
    if value % MINUTE_MS:
        raise ValueError(f"{name}={value} is not a minute start (a multiple of {MINUTE_MS})")


def next_fire_ms(expr: str, timezone: str, after_ms: int) -> int:
    """The first minute start strictly after ``after_ms`` at which the schedule fires."""
    schedule = parse(expr)
    zone = resolve_zone(timezone)
    check_ms(after_ms, "after_ms")
    return _next_fire(schedule, zone, after_ms)


def fires_at(expr: str, timezone: str, minute_ms: int) -> bool:
    """Whether the schedule fires at the UTC minute starting at ``minute_ms``."""
    check_minute(minute_ms, "minute_ms")
    return next_fire_ms(expr, timezone, minute_ms - 1) == minute_ms


def wall_minute_ms(timezone: str, minute_ms: int) -> int:
    """The wall minute (naive ms, as a clock on the wall in ``timezone`` shows it) of the UTC
    minute starting at ``minute_ms``: both passes of a repeated hour show the same wall minute."""
    zone = resolve_zone(timezone)
    check_ms(minute_ms, "minute_ms")
    wall = minute_ms + _offset_ms(zone, minute_ms)
    return wall - wall % MINUTE_MS


def matches_wall(expr: str, wall_ms: int) -> bool:
    """Whether the expression names the wall minute ``wall_ms`` (naive ms): the clock's reading,
    not a fire time (no DST rule applies; an excluded wall minute is excluded in both passes)."""
    wall = wall_ms - wall_ms % MINUTE_MS
    return parse(expr).next_wall(wall - MINUTE_MS) == wall


def upcoming(expr: str, timezone: str, after_ms: int, count: int) -> list[int]:
    """The next ``count`` (at most :data:`MAX_UPCOMING`) fire minutes after ``after_ms``."""
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_UPCOMING:
        raise ValueError(f"count must be an int in 0..{MAX_UPCOMING}, got {count!r}")
    fires: list[int] = []
    cursor = after_ms
    for _ in range(count):
        cursor = next_fire_ms(expr, timezone, cursor)
        fires.append(cursor)
    return fires


def dst_note(expr: str, timezone: str, fire_ms: int) -> str | None:
    """How the DST rule placed the fire at ``fire_ms`` (one of ``upcoming``), in words; None when
    no transition touches it. A wall-clock schedule whose time does not exist that day runs at the
    end of the gap; in a repeated hour it runs once, in the first pass; an elapsed-time schedule
    runs in both passes and not in a gap."""
    schedule = parse(expr)
    zone = resolve_zone(timezone)
    check_minute(fire_ms, "fire_ms")
    wall = fire_ms + _offset_ms(zone, fire_ms)
    before, after = _wall_offsets_ms(zone, wall)
    if before > after:  # this wall time happens twice
        if not schedule.elapsed:
            return "repeated hour (clocks go back): runs once, in the first pass"
        which = "first" if fire_ms == _ceil_minute(wall - before) else "second"
        return f"repeated hour (clocks go back): runs in both passes; this is the {which}"
    previous_offset = _offset_ms(zone, fire_ms - MINUTE_MS)
    skipped_from = fire_ms + previous_offset  # the first wall time the clocks jumped over
    jumped = previous_offset < _offset_ms(zone, fire_ms)
    if jumped and not schedule.elapsed and schedule.next_wall(skipped_from - MINUTE_MS) < wall:
        named = _EPOCH_NAIVE + timedelta(milliseconds=schedule.next_wall(skipped_from - MINUTE_MS))
        return f"{named:%H:%M} does not exist that day (clocks go forward): runs when the gap ends"
    return None


def _next_fire(schedule: Schedule, zone: ZoneInfo, after_ms: int) -> int:
    """Walk matching wall minutes and map each to the instant(s) it fires at.

    The earliest instant of each wall time ("first pass", or the gap's end for a
    wall-clock schedule) only grows as wall times grow, so the walk can start at the wall
    time of ``after_ms`` and stop at the first wall whose earliest instant is past it.
    The one exception is the second pass of an elapsed-time schedule: when ``after_ms``
    lies inside a fall-back's repeated hour, wall times up to one repeat length earlier
    still fire again later, so the walk starts that much earlier.
    """
    minute = after_ms - after_ms % MINUTE_MS
    wall = minute + _offset_ms(zone, minute)
    if schedule.elapsed:
        wall -= _repeat_length_ms(zone, wall)
    best: int | None = None
    for _ in range(_MAX_CANDIDATES):
        wall = schedule.next_wall(wall)
        first, again = _instants(zone, wall, schedule.elapsed)
        for instant in (first, again):
            if instant is not None and instant > after_ms and (best is None or instant < best):
                best = instant
        if first is not None and first > after_ms:
            # Later wall times map to later instants (second passes even later), so
            # nothing still to come can beat `best`.
            assert best is not None
            return best
    raise InvalidCronError(
        f"cron: no fire time found for {schedule.expr!r} in {zone.key} after {after_ms}", cron=schedule.expr
    )


def _instants(zone: ZoneInfo, wall_ms: int, elapsed: bool) -> tuple[int | None, int | None]:
    """(earliest instant, second-pass instant) at which the wall minute fires, if any."""
    before, after = _wall_offsets_ms(zone, wall_ms)
    if before == after:
        return _ceil_minute(wall_ms - before), None
    if before > after:  # fall-back: the wall time occurs twice, `before` is the first pass
        first = _ceil_minute(wall_ms - before)
        return first, (_ceil_minute(wall_ms - after) if elapsed else None)
    # Spring-forward gap: the wall time does not exist.
    if elapsed:
        return None, None
    return _gap_end_ms(zone, wall_ms, before, after), None


def _gap_end_ms(zone: ZoneInfo, wall_ms: int, before: int, after: int) -> int:
    """The first minute start at or after the transition that skipped ``wall_ms``.

    Reading the wall time with the offset after the change gives an instant before the
    transition, with the offset before it one after; the transition is the first minute
    whose wall time is past ``wall_ms``. Binary search: a gap is at most a few hours.
    """
    low = (wall_ms - after) // MINUTE_MS  # in minutes; wall time still before the gap
    high = -(-(wall_ms - before) // MINUTE_MS)  # wall time already after the gap
    while high - low > 1:
        middle = (low + high) // 2
        instant = middle * MINUTE_MS
        if instant + _offset_ms(zone, instant) > wall_ms:
            high = middle
        else:
            low = middle
    return high * MINUTE_MS


def _repeat_length_ms(zone: ZoneInfo, wall_ms: int) -> int:
    """How much earlier a repeated (fall-back) wall time first occurred; 0 if it is unique."""
    before, after = _wall_offsets_ms(zone, wall_ms)
    return max(before - after, 0)


def _offset_ms(zone: ZoneInfo, instant_ms: int) -> int:
    # timedelta arithmetic rather than fromtimestamp(): no platform limits before 1970.
    local = (_EPOCH + timedelta(milliseconds=instant_ms)).astimezone(zone)
    return _delta_ms(local.utcoffset())


def _wall_offsets_ms(zone: ZoneInfo, wall_ms: int) -> tuple[int, int]:
    """UTC offsets for a wall time read with fold=0 and fold=1 (PEP 495).

    Both are the offset before and after the nearest transition when the wall time is
    ambiguous or missing: equal -> an ordinary time, before > after -> it occurs twice,
    before < after -> it falls in a gap and does not exist.
    """
    naive = _EPOCH_NAIVE + timedelta(milliseconds=wall_ms)
    first = naive.replace(tzinfo=zone).utcoffset()
    second = naive.replace(tzinfo=zone, fold=1).utcoffset()
    return _delta_ms(first), _delta_ms(second)


def _delta_ms(delta: timedelta | None) -> int:
    if delta is None:  # ZoneInfo always knows its offset; keeps the type checker honest
        raise ValueError("time zone returned no UTC offset")
    return delta // _ONE_MS


def _ceil_minute(instant_ms: int) -> int:
    # Historic offsets with seconds (e.g. Africa/Monrovia until 1972) start wall minutes
    # mid-way through a UTC minute; such a fire moves to the next UTC minute start.
    return -(-instant_ms // MINUTE_MS) * MINUTE_MS
