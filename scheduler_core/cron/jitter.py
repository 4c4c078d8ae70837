"""Jitter: a task's scheduled occurrence starts a little after its minute, by an amount derived
from its occurrence id -- the same on every node, and for a re-run of the occurrence -- so that
many tasks on one minute do not start at once (docs/semantics.md O8).

The delay of the occurrence of ``minute_ms`` is the first 8 bytes of SHA-256 of its cron
occurrence id, modulo ``jitter_ms + 1``: spread evenly over ``0..jitter_ms``. A jitter is at most
half the shortest time between two of the schedule's fire times (``check_jitter``), so that an
occurrence starts before the next one is due."""

from __future__ import annotations

import hashlib

from scheduler_core.cron.fire_times import next_fire_ms
from scheduler_core.cron.occurrence_ids import cron_occurrence_id
from scheduler_core.errors import ConfigError

# The fire times the bound looks at: from a fixed instant (the verdict is the same on every
# node and every day), enough of them to meet a schedule's irregular gaps (weekdays, DST).
_REFERENCE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_GAPS = 60


def jitter_delay(task_id: str, minute_ms: int, jitter_ms: int | None) -> int:
    """The delay of the task's cron occurrence of ``minute_ms``: 0..``jitter_ms`` (0 without one)."""
    if not jitter_ms:
        return 0
    digest = hashlib.sha256(cron_occurrence_id(task_id, minute_ms).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_ms + 1)


def shortest_gap_ms(cron: str, timezone: str) -> int:
    """The shortest time between two consecutive fire times of the schedule, among its first
    ``_GAPS`` from a fixed reference instant (and across this year's DST changes)."""
    gaps = []
    for start in (_REFERENCE_MS, _REFERENCE_MS + 85 * 86_400_000, _REFERENCE_MS + 298 * 86_400_000):
        fire = next_fire_ms(cron, timezone, start)
        for _ in range(_GAPS // 3):
            after = next_fire_ms(cron, timezone, fire)
            gaps.append(after - fire)
            fire = after
    return min(gaps)


def check_jitter(cron: str, timezone: str, jitter_ms: int) -> None:
    """Refuse a jitter over half the schedule's shortest gap, naming ``jitter_ms``."""
    gap = shortest_gap_ms(cron, timezone)
    if jitter_ms > gap // 2:
        raise ConfigError("jitter_ms", f"must be at most half the shortest time between two fire times of "
                                       f"'{cron}' ({gap // 2} ms of {gap} ms), so that an occurrence starts "
                                       f"before the next one is due (got {jitter_ms})")
