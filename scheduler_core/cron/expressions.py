"""Cron expressions: what is accepted, normalised how, and the message for what is refused.

``validate_cron`` returns the stored spelling (whitespace collapsed, macros lower-cased,
one-value ranges as one value); a refusal is an :class:`InvalidCronError` whose message
names the field and what it takes. ``parse`` gives the cached :class:`Schedule` that
walks an expression's naive wall minutes for ``fire_times`` and ``description``.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

from croniter import CroniterBadDateError, CroniterError, croniter

from scheduler_core.errors import InvalidCronError
from scheduler_core.validation import shown

__all__ = ["MACROS", "MAX_CRON_LENGTH", "Schedule", "parse", "validate_cron"]

MAX_CRON_LENGTH = 255  # tasks.cron is VARCHAR(255)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Where validation asks croniter for a first fire time; any fixed instant works because a
# 5-field expression that fires at all fires within croniter's 50-year search window.
_PROBE_WALL_S = 946_684_800.0  # 2000-01-01T00:00 (naive wall time)


class Schedule:
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


def validate_cron(expr: str) -> str:
    """Return ``expr`` normalised (whitespace collapsed, macros lower-cased) or raise.

    Raises :class:`InvalidCronError` naming ``cron`` and the value for anything that is not
    a string, not exactly five fields (seconds and year fields are refused), rejected by
    croniter, or never fires (``0 0 30 2 *``).
    """
    return parse(expr).expr


def parse(expr: str) -> Schedule:
    """The cached :class:`Schedule` of ``expr``; raises as :func:`validate_cron` does."""
    if not isinstance(expr, str):  # checked before the cache, which needs a hashable key
        raise InvalidCronError(f"cron: expected a string, got {type(expr).__name__}", cron=shown(expr))
    return _schedule(expr)


@lru_cache(maxsize=4096)
def _schedule(expr: str) -> Schedule:
    fields = expr.split()
    if not fields:
        raise InvalidCronError("cron: the expression is empty", cron=expr)
    if len(fields) == 1 and fields[0].startswith("@"):
        macro = fields[0].lower()
        if macro not in MACROS:
            raise InvalidCronError(
                f"cron: unsupported macro {_show(expr)}; use 5 fields or one of {', '.join(MACROS)}", cron=expr
            )
        return Schedule(macro, MACROS[macro])
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
        schedule = Schedule(normalised, normalised)
        schedule.next_wall(int(_PROBE_WALL_S) * 1000)
    except CroniterError as exc:
        raise InvalidCronError(
            f"cron: {_show(expr)} is not a valid expression: {_field_reason(fields) or _croniter_reason(exc)}",
            cron=expr,
        ) from exc
    return schedule


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
