"""A task's policies: how it retries (``RetryPolicy``), what it does after downtime
(``CatchupPolicy``), what an occurrence does while its task's slot is held
(``OverlapPolicy``), when its cron may fire at all (``Calendar``: an active window and excluded
dates or minutes), and an operator's pause (``Pause``). Frozen values that check themselves when
made, so every door that builds one (Python, the form, the JSON API, a task file) refuses a bad
value with the same field and words."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, TypeVar

from scheduler_core.cron import MINUTE_MS, matches_wall, next_fire_ms, validate_cron, wall_minute_ms
from scheduler_core.errors import ConfigError, InvalidCronError
from scheduler_core.validation import check_choice, check_int, check_optional_ms

MAX_ATTEMPTS_RANGE = (1, 100)
BACKOFF_MAX_MS = 86_400_000  # one retry's wait, at most a day
P = TypeVar("P")


def _setting(cls: type[P], value: Any, field: str) -> P | None:
    """A settings value object from None, itself, or a mapping of its fields (an unknown key is
    refused by name; each field is checked by the class)."""
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"must be a mapping or {cls.__name__} (got {type(value).__name__})")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:
        raise ConfigError(f"{field}.{unknown[0][:40]}", f"is not a {field} setting")
    return cls(**value)


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failing idempotent task is tried, and how long to wait in between."""

    max_attempts: int = 1  # 1..100, counting the first attempt and every takeover
    backoff_ms: tuple[int, ...] = ()  # wait before attempt n+1 is backoff_ms[min(n-1, len-1)]

    def __post_init__(self) -> None:
        check_int(self.max_attempts, "retry.max_attempts", *MAX_ATTEMPTS_RANGE)
        if not isinstance(self.backoff_ms, tuple | list):
            raise ConfigError("retry.backoff_ms",
                              f"must be a list of milliseconds (got {type(self.backoff_ms).__name__})")
        if len(self.backoff_ms) > MAX_ATTEMPTS_RANGE[1]:
            raise ConfigError("retry.backoff_ms", f"must hold at most {MAX_ATTEMPTS_RANGE[1]} delays")
        for index, value in enumerate(self.backoff_ms):
            check_int(value, f"retry.backoff_ms[{index}]", 0, BACKOFF_MAX_MS)
        object.__setattr__(self, "backoff_ms", tuple(self.backoff_ms))

    def delay_before(self, next_attempt: int) -> int:
        """Milliseconds to wait before attempt ``next_attempt`` (2, 3, ...)."""
        if not self.backoff_ms:
            return 0
        return self.backoff_ms[min(next_attempt - 2, len(self.backoff_ms) - 1)]

    def to_json(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff_ms": list(self.backoff_ms)}

    @classmethod
    def parse(cls, value: RetryPolicy | Mapping[str, Any] | None) -> RetryPolicy | None:
        return _setting(cls, value, "retry")


class CatchupMode(StrEnum):
    """What a node does with a task's occurrences that nobody ran while the cluster was down."""

    NONE = "none"  # journal them as missed
    LATEST = "latest"  # run the most recent one inside the window; the others are missed
    ALL = "all"  # run each one inside the window, in order, through the task's slot


CATCHUP_WINDOW_MAX_MS = 7 * 86_400_000


@dataclass(frozen=True)
class CatchupPolicy:
    """A task's catch-up after downtime: ``policy`` and how far back it reaches (``window_ms``)."""

    policy: CatchupMode = CatchupMode.NONE
    window_ms: int = 3_600_000  # occurrences older than this (before the first node came back) are missed

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", check_choice(self.policy, "catchup.policy", CatchupMode))
        check_int(self.window_ms, "catchup.window_ms", 0, CATCHUP_WINDOW_MAX_MS)

    def to_json(self) -> dict[str, Any]:
        return {"policy": str(self.policy), "window_ms": self.window_ms}

    @classmethod
    def parse(cls, value: CatchupPolicy | Mapping[str, Any] | None) -> CatchupPolicy | None:
        return _setting(cls, value, "catchup")


class OverlapMode(StrEnum):
    """What a cron occurrence does when its task's one slot is held (by a run still going, or by an
    ``unknown`` one an operator has not resolved yet)."""

    SKIP = "skip"  # journaled skipped (slot_busy)
    BUFFER_ONE = "buffer_one"  # waits for the slot, at most one at a time; a second is skipped (buffer_full)
    BUFFER_ALL = "buffer_all"  # each waits its turn, in minute order, up to buffer_limit
    CANCEL_OTHER = "cancel_other"  # waits (as buffer_one), and the running one is asked to stop
    TERMINATE_OTHER = "terminate_other"  # the same, for handlers whose process the node kills (STOPPABLE_KINDS)


STOPPABLE_KINDS = frozenset({"python", "js", "command"})  # a cancelled attempt's process (group) is killed
BUFFER_LIMIT_RANGE = (1, 1000)


@dataclass(frozen=True)
class OverlapPolicy:
    """A task's overlap policy: ``policy``, and for ``buffer_all`` how many occurrences may wait
    (``buffer_limit``). Whatever the policy, a task runs one occurrence at a time."""

    policy: OverlapMode = OverlapMode.SKIP
    buffer_limit: int = 10  # buffer_all only: occurrences waiting at once, beyond which buffer_full

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", check_choice(self.policy, "overlap.policy", OverlapMode))
        check_int(self.buffer_limit, "overlap.buffer_limit", *BUFFER_LIMIT_RANGE)

    @property
    def waiting_limit(self) -> int:
        """How many of the task's cron occurrences may wait for its slot at once (0: none waits)."""
        if self.policy == OverlapMode.SKIP:
            return 0
        return self.buffer_limit if self.policy == OverlapMode.BUFFER_ALL else 1

    @property
    def supersedes(self) -> bool:
        """A waiting occurrence asks the running one to stop."""
        return self.policy in (OverlapMode.CANCEL_OTHER, OverlapMode.TERMINATE_OTHER)

    def check_kind(self, kind: str) -> None:
        """``terminate_other`` only where the node can truly stop the work (ConfigError otherwise)."""
        if self.policy == OverlapMode.TERMINATE_OTHER and kind not in STOPPABLE_KINDS:
            raise ConfigError("overlap.policy", f"terminate_other needs a handler whose process the node can kill "
                                                f"({', '.join(sorted(STOPPABLE_KINDS))}); a {kind} handler cannot be "
                                                "stopped for certain: use cancel_other")

    def to_json(self) -> dict[str, Any]:
        return {"policy": str(self.policy), "buffer_limit": self.buffer_limit}

    @classmethod
    def parse(cls, value: OverlapPolicy | Mapping[str, Any] | None) -> OverlapPolicy | None:
        return _setting(cls, value, "overlap")


EXCLUDE_MAX = 100  # exclusions per task
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DAY_MS = 86_400_000
_HOUR_MS = 3_600_000
_WALL_EPOCH = date(1970, 1, 1)
# How many of the cron's fire times a look-ahead (``Calendar.upcoming``) tries: exclusions that
# leave nothing for this long end the look-ahead early rather than search on (a page showing next
# fire times must not stall on a calendar that excludes every minute: about 0.1 s at most here).
_CANDIDATES_MAX = 500


@dataclass(frozen=True)
class Calendar:
    """When a task's cron may fire at all. A minute the cron names is *not due* (no journal row,
    not missed) when it is before ``active_from_ms``, at or after ``active_until_ms``, on an
    excluded date, or named by an excluded cron expression. Dates and expressions are read on the
    wall clock of the task's zone (``allows``), so an exclusion holds across a DST change."""

    active_from_ms: int | None = None  # unix ms, inclusive; None: from the start
    active_until_ms: int | None = None  # unix ms, exclusive; None: for ever
    exclude: tuple[str, ...] = ()  # "YYYY-MM-DD" (a whole day) or a 5-field cron naming minutes not to run

    def __post_init__(self) -> None:
        check_optional_ms(self.active_from_ms, "calendar.active_from_ms")
        check_optional_ms(self.active_until_ms, "calendar.active_until_ms")
        if (self.active_from_ms is not None and self.active_until_ms is not None
                and self.active_until_ms <= self.active_from_ms):
            raise ConfigError("calendar.active_until_ms", f"must be after active_from_ms: the window ends before it "
                                                          f"starts ({_utc(self.active_until_ms)} is not after "
                                                          f"{_utc(self.active_from_ms)})")
        if not isinstance(self.exclude, tuple | list):
            raise ConfigError("calendar.exclude",
                              f"must be a list of dates and cron expressions (got {type(self.exclude).__name__})")
        if len(self.exclude) > EXCLUDE_MAX:
            raise ConfigError("calendar.exclude", f"must hold at most {EXCLUDE_MAX} items (got {len(self.exclude)})")
        object.__setattr__(self, "exclude", tuple(_exclusion(item, f"calendar.exclude[{index}]")
                                                  for index, item in enumerate(self.exclude)))

    @cached_property
    def _dates(self) -> frozenset[int]:
        """The excluded dates as wall-day numbers (days since 1970-01-01)."""
        return frozenset((date.fromisoformat(item) - _WALL_EPOCH).days
                         for item in self.exclude if _DATE.fullmatch(item))

    @cached_property
    def _crons(self) -> tuple[str, ...]:
        return tuple(item for item in self.exclude if not _DATE.fullmatch(item))

    def allows(self, minute_ms: int, timezone: str) -> bool:
        """Whether the minute starting at ``minute_ms`` (UTC) may fire, read in ``timezone``."""
        if self.active_from_ms is not None and minute_ms < self.active_from_ms:
            return False
        if self.active_until_ms is not None and minute_ms >= self.active_until_ms:
            return False
        if not self.exclude:
            return True
        wall = wall_minute_ms(timezone, minute_ms)
        return wall // _DAY_MS not in self._dates and not any(matches_wall(expr, wall) for expr in self._crons)

    def upcoming(self, expr: str, timezone: str, after_ms: int, count: int) -> list[int]:
        """The next ``count`` fire minutes of ``expr`` after ``after_ms`` that the calendar allows
        (fewer when the window ends, or when exclusions leave none among the next
        ``_CANDIDATES_MAX`` fire times). An excluded day, or an hour or day an expression excludes
        whole (its minute field ``*``), is passed over at once, not minute by minute."""
        found: list[int] = []
        cursor = after_ms
        if self.active_from_ms is not None:
            cursor = max(cursor, self.active_from_ms - 1)
        for _ in range(_CANDIDATES_MAX):
            if len(found) >= count:
                break
            minute = next_fire_ms(expr, timezone, cursor)
            if self.active_until_ms is not None and minute >= self.active_until_ms:
                break
            if self.allows(minute, timezone):
                found.append(minute)
                cursor = minute
            else:
                cursor = _past(timezone, minute, self._excluded_span(wall_minute_ms(timezone, minute)))
        return found

    def _excluded_span(self, wall: int) -> int:
        """How much of the wall time around ``wall`` (an excluded minute) is excluded with it: the
        whole day, the whole hour, or just the minute."""
        if wall // _DAY_MS in self._dates:
            return _DAY_MS
        span = MINUTE_MS
        for expr in self._crons:
            if matches_wall(expr, wall):
                minute_field, hour_field = expr.split()[:2] if not expr.startswith("@") else ("0", "0")
                if minute_field == "*":
                    span = max(span, _DAY_MS if hour_field == "*" else _HOUR_MS)
        return span

    def to_json(self) -> dict[str, Any]:
        return {"active_from_ms": self.active_from_ms, "active_until_ms": self.active_until_ms,
                "exclude": list(self.exclude)}

    @classmethod
    def parse(cls, value: Calendar | Mapping[str, Any] | None) -> Calendar | None:
        return _setting(cls, value, "calendar")


def _past(timezone: str, minute_ms: int, span: int) -> int:
    """A cursor at most the end of the wall ``span`` (minute, hour or day) holding ``minute_ms``:
    the wall time to its end, less what a change of the zone's offset on the way takes off the
    real time (so a spring-forward never jumps into the next span)."""
    if span == MINUTE_MS:
        return minute_ms
    wall = wall_minute_ms(timezone, minute_ms)
    guess = minute_ms + (span - wall % span)
    gained = (wall_minute_ms(timezone, guess) - guess) - (wall - minute_ms)  # the offset grew by this much
    return max(minute_ms, guess - max(gained, 0) - MINUTE_MS)


def _utc(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S UTC")


def _exclusion(item: Any, field: str) -> str:
    """A date (``YYYY-MM-DD``, a real one) or a cron expression (normalised); else a ConfigError."""
    if not isinstance(item, str):
        raise ConfigError(field, f"must be a date (YYYY-MM-DD) or a cron expression (got {type(item).__name__})")
    text = item.strip()
    if _DATE.fullmatch(text):
        try:
            date.fromisoformat(text)
        except ValueError as exc:
            raise ConfigError(field, f"{text!r} is not a date: {exc}") from None
        return text
    try:
        return validate_cron(text)
    except InvalidCronError as exc:
        raise ConfigError(field, f"is neither a date (YYYY-MM-DD) nor a cron expression: "
                                 f"{exc.message.removeprefix('cron: ')}") from None


@dataclass(frozen=True)
class Pause:
    """A task paused by an operator: no cron occurrences until resumed (or ``until``)."""

    at: int  # DB-clock ms
    until: int | None  # resumes by itself at this DB-clock ms; None: until resume()
    by: str | None
    reason: str | None

    def active(self, now_ms: int) -> bool:
        return self.until is None or now_ms < self.until
