"""Cron schedules: validation, next fire minute across DST, deterministic occurrence ids.

Pure functions over UTC unix ms; nothing reads the node's clock or ``TZ``. The DST rules are in
docs/semantics.md ("Occurrences")."""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from scheduler_core.errors import ConfigError, InvalidCronError
from scheduler_core.validation import shown

__all__ = [
    "MAX_UPCOMING",
    "MINUTE_MS",
    "OCCURRENCE_NAMESPACE",
    "cron_occurrence_id",
    "describe",
    "fires_at",
    "manual_occurrence_id",
    "new_occurrence_id",
    "next_fire_ms",
    "upcoming",
    "validate_cron",
    "validate_timezone",
]

MINUTE_MS = 60_000
# Fixed forever: changing it would give every cron occurrence a new id, so a rolling
# upgrade would run the same minute twice.
OCCURRENCE_NAMESPACE = uuid.UUID("e938f54a-deb7-4158-bc5d-9d22ef741604")
MAX_UPCOMING = 1000  # a dashboard preview, not a bulk export
MAX_CRON_LENGTH = 255  # tasks.cron is VARCHAR(255)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Loadable by ZoneInfo on some hosts but not a location: "localtime" follows the host's
# /etc/localtime, which would make fire times depend on the node.
_REFUSED_ZONES = frozenset({"localtime", "posixrules", "Factory"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)
# Keeps datetime arithmetic and croniter's 50-year search far from datetime's year limits.
_MIN_MS = -2_208_988_800_000  # 1900-01-01T00:00Z
_MAX_MS = 221_845_392_000_000  # 9000-01-01T00:00Z
# Where validation asks croniter for a first fire time; any fixed instant works because a
# 5-field expression that fires at all fires within croniter's 50-year search window.
_PROBE_WALL_S = 946_684_800.0  # 2000-01-01T00:00 (naive wall time)
# next_fire_ms visits at most a few hours of candidate wall minutes around a transition
# (a 24 h gap, as Pacific/Apia 2011, is 1440); more means a bug, not a schedule.
_MAX_CANDIDATES = 10_000


class _Schedule:
    """A validated expression and its croniter, which walks naive wall times.

    croniter objects are stateful (``get_next`` moves the cursor), so one cached instance
    is shared under a lock rather than re-parsed on each call.
    """

    __slots__ = ("_iter", "_lock", "elapsed", "expr")

    def __init__(self, expr: str, five_fields: str) -> None:
        self.expr = expr
        self.elapsed = five_fields.split()[1].startswith("*")
        # Naive float timestamps: croniter then does plain calendar arithmetic (it treats
        # them as UTC), never consulting a zone or the process TZ.
        self._iter = croniter(five_fields, _PROBE_WALL_S)
        self._lock = threading.Lock()

    def next_wall(self, wall_ms: int) -> int:
        """The first matching wall minute strictly after ``wall_ms`` (both naive wall ms)."""
        with self._lock:
            self._iter.set_current(wall_ms / 1000, force=True)
            try:
                seconds: float = self._iter.get_next(float)
            except CroniterBadDateError as exc:
                raise InvalidCronError(f"cron: {self.expr!r} never fires", cron=self.expr) from exc
        return int(seconds) * 1000


# --- validation ---------------------------------------------------------------------


def validate_cron(expr: str) -> str:
    """Return ``expr`` normalised (whitespace collapsed, macros lower-cased) or raise.

    Raises :class:`InvalidCronError` naming ``cron`` and the value for anything that is not
    a string, not exactly five fields (seconds and year fields are refused), rejected by
    croniter, or never fires (``0 0 30 2 *``).
    """
    return _parse(expr).expr


def validate_timezone(name: str | None) -> str:
    """Return the IANA zone name (``None`` or ``""`` mean ``"UTC"``) or raise :class:`ConfigError`."""
    return _resolve_zone(name).key


def _parse(expr: str) -> _Schedule:
    if not isinstance(expr, str):  # checked before the cache, which needs a hashable key
        raise InvalidCronError(f"cron: expected a string, got {type(expr).__name__}", cron=shown(expr))
    return _schedule(expr)


def _resolve_zone(name: str | None) -> ZoneInfo:
    if name is None or name == "":
        return _zone("UTC")
    if not isinstance(name, str):
        raise ConfigError("timezone", f"expected an IANA time zone name, got {type(name).__name__}")
    return _zone(name)


@lru_cache(maxsize=4096)
def _schedule(expr: str) -> _Schedule:
    fields = expr.split()
    if not fields:
        raise InvalidCronError("cron: the expression is empty", cron=expr)
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in _MACROS:
            raise InvalidCronError(
                f"cron: unsupported macro {_show(expr)}; use 5 fields or one of {', '.join(_MACROS)}", cron=expr
            )
        return _Schedule(macro, _MACROS[macro])
    normalised = " ".join(_single_value_ranges(field) for field in fields)
    if len(fields) != 5:
        raise InvalidCronError(
            f"cron: {_show(expr)} has {len(fields)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week; no seconds or year field)",
            cron=expr,
        )
    if len(normalised) > MAX_CRON_LENGTH:
        raise InvalidCronError(f"cron: expression longer than {MAX_CRON_LENGTH} characters", cron=expr)
    _refuse_oversized_steps(expr, fields)
    try:
        # strict=True also refuses day/month pairs that can never occur, with a clear message.
        croniter.expand(normalised, strict=True)
        schedule = _Schedule(normalised, normalised)
        schedule.next_wall(int(_PROBE_WALL_S) * 1000)
    except CroniterError as exc:
        raise InvalidCronError(
            f"cron: {_show(expr)} is not a valid expression: {_field_reason(fields) or _croniter_reason(exc)}",
            cron=expr,
        ) from exc
    return schedule


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    refusal = f"{_show(name)} is not an IANA time zone name (e.g. 'Europe/Berlin' or 'UTC')"
    # Membership keeps out absolute paths, "posix/..." and "right/..." copies and
    # case variants that only resolve on case-insensitive file systems.
    if name in _REFUSED_ZONES or name not in _known_zones():
        raise ConfigError("timezone", refusal, value=name)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ConfigError("timezone", refusal, value=name) from exc


@lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


# How many values each field has: a step beyond that is a typo (``0-59/61``), not a schedule.
_FIELD_VALUES = (("minute", 60), ("hour", 24), ("day-of-month", 31), ("month", 12), ("day-of-week", 7))
_STEP = re.compile(r"/([0-9]+)$")


def _refuse_oversized_steps(expr: str, fields: list[str]) -> None:
    for field, (name, count) in zip(fields, _FIELD_VALUES, strict=True):
        for part in field.split(","):
            match = _STEP.search(part)
            if match and (len(match.group(1)) > 3 or not 1 <= int(match.group(1)) <= count):
                raise InvalidCronError(f"cron: {_show(expr)}: the {name} step /{match.group(1)[:8]} must be between 1 "
                                       f"and {count}", cron=expr)


# What each field takes, for a message that names the field instead of quoting croniter's
# "[*/5 * * * mno] is not acceptable".
_FIELD_TAKES = (
    "0-59",
    "0-23",
    "1-31, L (the last day) or ?",
    "1-12 or JAN-DEC",
    "0-6 or SUN-SAT (7 is Sunday too), 5#2 (the second Friday) or ?",
)


def _field_reason(fields: list[str]) -> str | None:
    """Which field croniter refused and what it takes: each field alone among ``*`` (so a
    day/month pair that never occurs, ``30 2``, is left to croniter's own message)."""
    for index, (field, (name, _count), takes) in enumerate(zip(fields, _FIELD_VALUES, _FIELD_TAKES, strict=True)):
        probe = ["*"] * 5
        probe[index] = _single_value_ranges(field)
        try:
            croniter.expand(" ".join(probe))
        except CroniterError:
            return f"the {name} field (field {index + 1}) {_show(field)} is not acceptable: {name} takes {takes}"
    return None


_ONE_VALUE_RANGE = re.compile(r"^([0-9A-Za-z]+)-([0-9A-Za-z]+)(?:/[0-9]+)?$")


def _single_value_ranges(field: str) -> str:
    """``5-5`` (or ``5-5/2``) written as ``5``: croniter reads a one-value range in the minute
    field as ``*`` -- every minute instead of minute 5."""
    parts = []
    for part in field.split(","):
        match = _ONE_VALUE_RANGE.match(part)
        parts.append(match.group(1) if match and match.group(1).lower() == match.group(2).lower() else part)
    return ",".join(parts)


def _show(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _croniter_reason(exc: Exception) -> str:
    # croniter wraps unexpected ValueErrors with a whole traceback as the message.
    lines = str(exc).strip().splitlines()
    return (lines[-1] if lines else type(exc).__name__)[:200]


def _check_ms(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int unix milliseconds, got {type(value).__name__}")
    if not _MIN_MS <= value <= _MAX_MS:
        raise ValueError(f"{name}={value} is outside 1900..9000")


def _check_minute(value: int, name: str) -> None:
    _check_ms(value, name)
    if value % MINUTE_MS:
        raise ValueError(f"{name}={value} is not a minute start (a multiple of {MINUTE_MS})")


# --- fire times ---------------------------------------------------------------------


def next_fire_ms(expr: str, timezone: str, after_ms: int) -> int:
    """The first minute start strictly after ``after_ms`` at which the schedule fires."""
    schedule = _parse(expr)
    zone = _resolve_zone(timezone)
    _check_ms(after_ms, "after_ms")
    return _next_fire(schedule, zone, after_ms)


def fires_at(expr: str, timezone: str, minute_ms: int) -> bool:
    """Whether the schedule fires at the UTC minute starting at ``minute_ms``."""
    _check_minute(minute_ms, "minute_ms")
    return next_fire_ms(expr, timezone, minute_ms - 1) == minute_ms


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


def _next_fire(schedule: _Schedule, zone: ZoneInfo, after_ms: int) -> int:
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


# --- occurrence ids -----------------------------------------------------------------


def cron_occurrence_id(task_id: str, minute_ms: int) -> str:
    """The id of a task's cron occurrence at a minute: the same on every node."""
    _check_text(task_id, "task_id")
    _check_minute(minute_ms, "minute_ms")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"cron\x00{task_id}\x00{minute_ms}"))


def manual_occurrence_id(task_id: str, idempotency_key: str) -> str:
    """The id of a manual trigger: retries with the same idempotency key get the same id."""
    _check_text(task_id, "task_id")
    _check_text(idempotency_key, "idempotency_key")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"manual\x00{task_id}\x00{idempotency_key}"))


def new_occurrence_id() -> str:
    """A fresh random occurrence id (a manual trigger without an idempotency key)."""
    return str(uuid.uuid4())


def _check_text(value: str, name: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    # NUL separates the parts hashed into an id; allowing it would let two different
    # (task_id, key) pairs hash the same text.
    if not value or "\x00" in value:
        raise ValueError(f"{name} must be a non-empty string without NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not encodable as UTF-8") from exc


# --- human descriptions -------------------------------------------------------------
#
# ``describe`` reads the expression the way croniter expands it (names, steps, ranges and
# lists all become sets of values), so equivalent spellings get the same sentence, and
# the sentence says what the schedule does rather than how it is written.

_FIELD_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_MAX_LISTED_TIMES = 6  # more fixed times than this read better as minute and hour clauses
_MAX_LISTED_MONTHS = 4
_NEAREST_WEEKDAY = re.compile(r"^(\d{1,2})W$", re.IGNORECASE)

# A field's values as a shape: ("any",), ("one", v), ("range", a, b), ("step", n, first, last | None)
# where None means "to the end of the field", or ("list", [v | (a, b), ...]).
_Shape = tuple[Any, ...]


def describe(expr: str) -> str:
    """A sentence saying when ``expr`` fires, in 24-hour wall-clock time of the task's zone.

    ``describe("30 2 * * 1-5") == "At 02:30, Monday through Friday"``. Raises
    :class:`InvalidCronError` for anything :func:`validate_cron` refuses. When both the
    day of month and the day of week are restricted the schedule fires on either (cron's
    OR rule), and the sentence says "or".
    """
    schedule = _parse(expr)
    five = _MACROS.get(schedule.expr, schedule.expr)
    expanded, nth = croniter.expand(five, strict=True)
    shapes = [_shape(values, low, high) for values, (low, high) in zip(expanded, _FIELD_BOUNDS, strict=True)]
    minute, hour, dom, month, dow = shapes
    time_text, fixed = _time_phrase(minute, hour)
    parts = [time_text, *_day_phrases(dom, dow, nth, five.split()[2]), *_month_phrase(month)]
    if fixed and len(parts) == 1:
        parts.append("every day")
    sentence = ", ".join(part for part in parts if part)
    return sentence[0].upper() + sentence[1:]


def _shape(values: list[Any], low: int, high: int) -> _Shape:
    if values == ["*"]:
        return ("any",)
    numbers = sorted(v for v in values if isinstance(v, int))
    if len(numbers) != len(values):  # "l" (last day of the month) among them: a plain list
        return ("list", [*_runs(numbers), "L"])
    if len(numbers) == 1:
        return ("one", numbers[0])
    steps = {b - a for a, b in itertools.pairwise(numbers)}
    if steps == {1} and len(numbers) >= 3:
        return ("range", numbers[0], numbers[-1])
    if len(steps) == 1 and (step := steps.pop()) > 1:
        if numbers[-1] + step > high and numbers[0] - step < low:  # runs to the end from the start
            return ("step", step, numbers[0], None)
        if len(numbers) >= 3:
            return ("step", step, numbers[0], numbers[-1])
    return ("list", _runs(numbers))


def _runs(numbers: list[int]) -> list[Any]:
    """[1, 2, 3, 7] -> [(1, 3), 7]: runs of three or more consecutive values become ranges."""
    items: list[Any] = []
    start = 0
    for index in range(1, len(numbers) + 1):
        if index == len(numbers) or numbers[index] != numbers[index - 1] + 1:
            run = numbers[start:index]
            items.extend([(run[0], run[-1])] if len(run) >= 3 else run)
            start = index
    return items


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _clock(hour: int, minute: int = 0) -> str:
    return f"{hour:02d}:{minute:02d}"


def _time_phrase(minute: _Shape, hour: _Shape) -> tuple[str, bool]:
    """The time of day, and whether it is a list of fixed times ("At 02:30")."""
    minutes, hours = _expand_items(minute, 59), _expand_items(hour, 23)
    if minutes and hours and len(minutes) * len(hours) <= _MAX_LISTED_TIMES:
        return "At " + _join([_clock(h, m) for h in hours for m in minutes]), True
    if minute == ("one", 0) and hour[0] in ("any", "step", "range"):
        return _whole_hours(hour), False
    hour_text = _hour_clause(hour)
    return ", ".join(part for part in (_minute_phrase(minute), hour_text) if part), False


def _whole_hours(hour: _Shape) -> str:
    """Minute 0 of a set of hours: "Every hour", "Every 2 hours", "Every hour from 09:00 through 17:00"."""
    if hour[0] == "any":
        return "Every hour"
    if hour[0] == "range":
        return f"Every hour from {_clock(hour[1])} through {_clock(hour[2])}"
    _, step, first, last = hour
    if last is not None:
        return f"Every {step} hours from {_clock(first)} through {_clock(last)}"
    return f"Every {step} hours" + (f", starting at {_clock(first)}" if first else "")


def _minutes_past(values: str, count: int) -> str:
    return f"{values} minute{'s' if count != 1 else ''} past the hour"


def _minute_phrase(minute: _Shape) -> str:
    kind = minute[0]
    if kind == "any":
        return "Every minute"
    if kind == "one":
        return "At " + _minutes_past(str(minute[1]), minute[1])
    if kind == "range":
        return f"Every minute from {_minutes_past(f'{minute[1]} through {minute[2]}', 2)}"
    if kind == "step":
        _, step, first, last = minute
        if last is not None:
            return f"Every {step} minutes from {_minutes_past(f'{first} through {last}', 2)}"
        return f"Every {step} minutes" + (f", starting at {_minutes_past(str(first), first)}" if first else "")
    items = [f"{item[0]}-{item[1]}" if isinstance(item, tuple) else str(item) for item in minute[1]]
    return "At " + _minutes_past(_join(items), 2)


def _hour_clause(hour: _Shape) -> str:
    kind = hour[0]
    if kind == "any":
        return ""
    if kind == "one":
        return f"between {_clock(hour[1])} and {_clock(hour[1], 59)}"
    if kind == "range":
        return f"between {_clock(hour[1])} and {_clock(hour[2], 59)}"
    if kind == "step":
        _, step, first, last = hour
        if last is not None:
            return f"every {step} hours from {_clock(first)} through {_clock(last)}"
        return f"every {step} hours" + (f", starting at {_clock(first)}" if first else "")
    items = [f"{_clock(item[0])}-{_clock(item[1], 59)}" if isinstance(item, tuple)
             else f"{_clock(item)}-{_clock(item, 59)}" for item in hour[1]]
    return "during " + _join(items)


def _day_phrases(dom: _Shape, dow: _Shape, nth: dict[int, set[Any]], dom_text: str) -> list[str]:
    month_days = _month_day_phrase(dom, dom_text)
    weekdays = _weekday_phrase(dow, nth)
    if month_days and weekdays:  # cron's OR rule: either one matches
        return [f"{month_days} or {weekdays.removeprefix('only ')}"]
    return [text for text in (month_days, weekdays) if text]


def _day_name(item: Any) -> str:
    if item == "L":
        return "the last day"
    if isinstance(item, tuple):
        return f"{item[0]} through {item[1]}"
    return str(item)


def _month_day_phrase(dom: _Shape, dom_text: str) -> str:
    kind = dom[0]
    nearest = _NEAREST_WEEKDAY.match(dom_text)
    if nearest:
        return f"on the weekday nearest day {int(nearest.group(1))} of the month"
    if kind == "any":
        return ""
    if kind == "one":
        return f"on day {dom[1]} of the month"
    if kind == "range":
        return f"on days {dom[1]} through {dom[2]} of the month"
    if kind == "step":
        _, step, first, last = dom
        if last is not None:
            return f"every {step} days from day {first} through {last} of the month"
        return f"on every {_ordinal(step)} day of the month" + (f", starting on day {first}" if first != 1 else "")
    items = dom[1]
    if items == ["L"]:
        return "on the last day of the month"
    numbered = [item for item in items if item != "L"]
    prefix = "on day " if len(numbered) == 1 and not isinstance(numbered[0], tuple) else "on days "
    return prefix + _join([_day_name(item) for item in items]) + " of the month"


def _weekday_phrase(dow: _Shape, nth: dict[int, set[Any]]) -> str:
    if dow[0] == "any":
        return ""
    if nth:
        occurrences = [f"the {'last' if n == 'l' else _ORDINALS.get(n, _ordinal(n))} {_WEEKDAYS[day]}"
                       for day in sorted(nth) for n in sorted(nth[day], key=str)]
        return "on " + _join(occurrences) + " of the month"
    if dow[0] == "range":
        return f"{_WEEKDAYS[dow[1]]} through {_WEEKDAYS[dow[2]]}"
    days = sorted(_expand_items(dow, 6), key=lambda day: (day - 1) % 7)  # Monday first
    return "only on " + _join([_WEEKDAYS[day] for day in days])


def _month_phrase(month: _Shape) -> list[str]:
    kind = month[0]
    if kind == "any":
        return []
    if kind == "range":
        return [f"{_MONTHS[month[1] - 1]} through {_MONTHS[month[2] - 1]}"]
    months = _expand_items(month, 12)
    if kind == "step" and month[3] is None and month[2] == 1 and len(months) > _MAX_LISTED_MONTHS:
        return [f"every {month[1]} months"]
    return ["only in " + _join([_MONTHS[m - 1] for m in months])]


def _expand_items(shape: _Shape, high: int) -> list[int]:
    """Every value of a field, in order; [] for "any" (and for a list with the last day)."""
    if shape[0] == "any" or (shape[0] == "list" and "L" in shape[1]):
        return []
    if shape[0] == "one":
        return [shape[1]]
    if shape[0] == "range":
        return list(range(shape[1], shape[2] + 1))
    if shape[0] == "step":
        _, step, first, last = shape
        return list(range(first, (high if last is None else last) + 1, step))
    values: list[int] = []
    for item in shape[1]:
        values.extend(range(item[0], item[1] + 1) if isinstance(item, tuple) else [item])
    return values
