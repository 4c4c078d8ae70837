"""Noticing the database clock jump: a failover to a server whose clock differs.

Leases are on the database clock (docs/semantics.md, "Time"), so a promoted standby whose clock
is X ahead shortens every lease by X at once. ``ClockWatch`` compares each tick's database
reading with this node's monotonic clock; the reading's own uncertainty (half the statement's
round trip, at each end) is allowed for, so a slow answer is not a jump. A jump beyond the
tolerance is reported once per reading; the node then renews its leases at once, which keeps a
jump ahead of up to about two thirds of a lease from costing any lease (runtime/node.py).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_TOLERANCE_MS = 2_000  # a jump of more than this is always worth an operator's look
MIN_TOLERANCE_MS = 250


def jump_tolerance_ms(lease_ms: int) -> int:
    """lease/6, within 250 ms .. 2 s: small against the lease, large against a tick's noise."""
    return max(MIN_TOLERANCE_MS, min(lease_ms // 6, MAX_TOLERANCE_MS))


@dataclass(frozen=True)
class Reading:
    db_ms: int  # the database clock, read by one statement
    sent_s: float  # monotonic seconds when the statement was sent
    answered_s: float  # and when its answer arrived


class ClockWatch:
    """``observe`` each reading; it returns the jump in ms (positive: the database clock went
    ahead) when one exceeds the tolerance, else None."""

    def __init__(self, tolerance_ms: int) -> None:
        self.tolerance_ms = tolerance_ms
        self._last: Reading | None = None

    def observe(self, reading: Reading) -> int | None:
        last, self._last = self._last, reading
        if last is None:
            return None
        local_ms = ((reading.sent_s + reading.answered_s) - (last.sent_s + last.answered_s)) * 500
        jump = (reading.db_ms - last.db_ms) - local_ms
        noise = ((reading.answered_s - reading.sent_s) + (last.answered_s - last.sent_s)) * 500
        return round(jump) if abs(jump) > self.tolerance_ms + noise else None
