"""The pause form's end: a number of minutes from now, or a wall time typed in the viewer's zone,
read into a DB-clock instant 1 minute to 7 days ahead, or the errors next to its fields."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from scheduler_core.cron import validate_timezone
from scheduler_core.errors import ConfigError
from webapp.forms import whole_number
from webapp.timefmt import wall_ms, wall_text

LONGEST_PAUSE_MIN = 7 * 24 * 60


@dataclass(frozen=True)
class PauseEnd:
    """When a pause ends, read from the pause form, or why it cannot be read."""

    until_ms: int | None  # None: until someone resumes it
    errors: dict[str, str]  # form field -> message; empty when until_ms is usable
    shown: str = ""  # the end as the flash says it: in UTC, and in the viewer's zone when typed there


def pause_end(minutes: str, until: str, zone_name: str, now_ms: int) -> PauseEnd:
    """The pause form's end: ``minutes`` from now, or ``until``, a ``datetime-local`` value read in
    ``zone_name`` (the viewer's zone, filled in by app.js; UTC when empty). At most one of the two;
    either way 1 minute to 7 days ahead of ``now_ms`` (the database clock)."""
    if minutes and until:
        return PauseEnd(None, {"until": "Give minutes or an until time, not both: clear one of them."})
    if minutes:
        count = whole_number(minutes)
        if count is None or not 1 <= count <= LONGEST_PAUSE_MIN:
            return PauseEnd(None, {"minutes": f"A whole number of minutes, 1 to {LONGEST_PAUSE_MIN} (7 days)."})
        end = now_ms + count * 60_000
        return PauseEnd(end, {}, f"for {count} min, until {wall_text(end, ZoneInfo('UTC'))}")
    if not until:
        return PauseEnd(None, {})
    try:
        zone = ZoneInfo(validate_timezone(zone_name or "UTC"))
    except ConfigError:
        return PauseEnd(None, {"until_tz": "Not an IANA time zone name; use one such as Europe/Berlin or UTC."})
    try:
        end = wall_ms(until, zone)
    except (ValueError, OverflowError):
        return PauseEnd(None, {"until": "Not a date and time; pick one, or type it as 2026-12-07T09:00."})
    return _bounded_end(end, zone, now_ms)


def _bounded_end(end: int, zone: ZoneInfo, now_ms: int) -> PauseEnd:
    if end <= now_ms:
        return PauseEnd(None, {"until": f"{_both(end, zone)} is in the past; it is now {_both(now_ms, zone)}."})
    latest = now_ms + LONGEST_PAUSE_MIN * 60_000
    if end > latest:
        return PauseEnd(None, {"until": f"{_both(end, zone)} is more than 7 days ahead, the longest pause; the "
                                        f"latest is {_both(latest, zone)}."})
    return PauseEnd(end, {}, f"until {_both(end, zone)}")


def _both(ms: int, zone: ZoneInfo) -> str:
    """``2026-12-07 09:00 CET (08:00 UTC)``: the time as typed, and in UTC (once when they are one)."""
    utc = wall_text(ms, ZoneInfo("UTC"))
    typed = wall_text(ms, zone)
    return utc if typed == utc else f"{typed} ({utc})"


__all__ = ["LONGEST_PAUSE_MIN", "PauseEnd", "pause_end"]
