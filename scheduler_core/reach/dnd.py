"""The do-not-disturb window: wall times in a timezone, possibly crossing midnight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler_core.reach.config import DndConfig


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def in_window(dnd: DndConfig, now_ms: int) -> bool:
    if not dnd.enabled:
        return False
    local = datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(ZoneInfo(dnd.timezone))
    minute = local.hour * 60 + local.minute
    start, end = _minutes(dnd.start), _minutes(dnd.end)
    return start <= minute < end if start < end else minute >= start or minute < end


def window_end_ms(dnd: DndConfig, now_ms: int) -> int:
    """The first instant at or after ``now_ms`` when the window is closed (its end)."""
    zone = ZoneInfo(dnd.timezone)
    local = datetime.fromtimestamp(now_ms / 1000, UTC).astimezone(zone)
    end_minutes = _minutes(dnd.end)
    for days in range(0, 3):
        day = (local + timedelta(days=days)).date()
        candidate = datetime(day.year, day.month, day.day, end_minutes // 60, end_minutes % 60, tzinfo=zone)
        candidate_ms = int(candidate.astimezone(UTC).timestamp() * 1000)
        if candidate_ms > now_ms and not in_window(dnd, candidate_ms):
            return candidate_ms
    return now_ms  # unreachable for a valid window; never hold a message forever
