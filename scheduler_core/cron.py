"""Cron schedules: validation, next fire minute across DST, deterministic occurrence ids.

Everything here is a pure function. Times are UTC unix milliseconds (ints); nothing reads
the node's clock or the process ``TZ``, so every node computes the same fire minutes and
the same occurrence ids. A schedule is a standard 5-field cron expression (minute hour
day-of-month month day-of-week, croniter's syntax and its day-of-month/day-of-week OR
rule) or one of the macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``,
read as wall-clock time in an IANA time zone.

DST rules (the product's promise)
---------------------------------
* **Wall-clock schedules** -- the hour field is anything not starting with ``*`` (``0 2 * * *``,
  ``30 1,13 * * *``, ``0 9-17 * * 1-5``): each matching wall time runs once per wall day.

  - A wall time skipped by a spring-forward gap fires at the first minute after the gap
    (the instant the clocks jump to); several skipped wall times collapse into that minute.
  - A wall time that occurs twice because of a fall-back fires only in its first pass.

* **Elapsed-time schedules** -- the hour field starts with ``*`` (``*/15 * * * *``,
  ``0 */2 * * *``, ``@hourly``): every real UTC minute is converted to wall time and matched.
  Minutes inside a gap do not exist, so nothing fires for them; during a fall-back the
  repeated wall minutes are distinct real minutes and fire in both passes.

Results are always minute starts (multiples of 60 000 ms).
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from scheduler_core.errors import ConfigError, InvalidCronError

__all__ = [
    "MAX_UPCOMING",
    "MINUTE_MS",
    "OCCURRENCE_NAMESPACE",
    "cron_occurrence_id",
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
        raise InvalidCronError(f"cron: expected a string, got {type(expr).__name__}", cron=repr(expr))
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
    normalised = " ".join(fields)
    if len(fields) != 5:
        raise InvalidCronError(
            f"cron: {_show(expr)} has {len(fields)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week; no seconds or year field)",
            cron=expr,
        )
    if len(normalised) > MAX_CRON_LENGTH:
        raise InvalidCronError(f"cron: expression longer than {MAX_CRON_LENGTH} characters", cron=expr)
    try:
        # strict=True also refuses day/month pairs that can never occur, with a clear message.
        croniter.expand(normalised, strict=True)
        schedule = _Schedule(normalised, normalised)
        schedule.next_wall(int(_PROBE_WALL_S) * 1000)
    except CroniterError as exc:
        raise InvalidCronError(
            f"cron: {_show(expr)} is not a valid expression: {_croniter_reason(exc)}", cron=expr
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
