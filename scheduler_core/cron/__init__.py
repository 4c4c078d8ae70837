"""Cron schedules: validation, next fire minute across DST, deterministic occurrence ids.

Pure functions over UTC unix ms; nothing reads the node's clock or ``TZ``. The DST rules are in
docs/semantics.md ("Occurrences"). This package's surface is re-exported here, one module per concept:
``expressions`` (what an expression may say, and the message for what it may not), ``zones`` (the
accepted time zone names), ``fire_times`` (fire minutes across DST), ``occurrence_ids`` and
``description`` (an expression in words)."""

from __future__ import annotations

from scheduler_core.cron.description import describe
from scheduler_core.cron.expressions import MAX_CRON_LENGTH as MAX_CRON_LENGTH
from scheduler_core.cron.expressions import validate_cron
from scheduler_core.cron.fire_times import (
    MAX_UPCOMING,
    MINUTE_MS,
    dst_note,
    fires_at,
    matches_wall,
    next_fire_ms,
    upcoming,
    wall_minute_ms,
)
from scheduler_core.cron.occurrence_ids import (
    OCCURRENCE_NAMESPACE,
    cron_occurrence_id,
    manual_occurrence_id,
    new_occurrence_id,
    random_id,
)
from scheduler_core.cron.zones import validate_timezone

__all__ = [
    "MAX_UPCOMING",
    "MINUTE_MS",
    "OCCURRENCE_NAMESPACE",
    "cron_occurrence_id",
    "describe",
    "dst_note",
    "fires_at",
    "manual_occurrence_id",
    "matches_wall",
    "new_occurrence_id",
    "next_fire_ms",
    "random_id",
    "upcoming",
    "validate_cron",
    "validate_timezone",
    "wall_minute_ms",
]
