"""Validated scheduler configuration."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from scheduler_core.errors import ConfigError
from scheduler_core.validation import check_bool, check_group, check_id, check_int, check_optional_int

LEASE_MS_RANGE = (1_000, 86_400_000)
MAX_GROUPS = 32


def default_node_id() -> str:
    return f"{socket.gethostname()[:80]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class SchedulerConfig:
    """How one node behaves. One line per field:"""

    node_id: str = field(default_factory=default_node_id)  # unique per process; 1..128 chars
    tick_interval_ms: int = 1_000  # how often the node refreshes, scans and claims; 100..60000
    lease_ms: int = 300_000  # ownership lease, renewed about every lease/3; 1000..86400000
    max_concurrency: int = 6  # handlers running at once; 1..1000 (needs a pool of max_concurrency + 4)
    max_queued: int = 2  # prefetch: claimed executions that may wait for a free thread; 0..100000
    max_logs: int | None = None  # retention: keep at most this many log rows; None = unlimited
    retention_days: int | None = None  # retention: drop log rows older than this; None = forever
    # journal retention: finished occurrences unchanged this long leave the journal with their
    # logs (keyed manual triggers after max(this, 30) days); 8..36500, None = keep forever
    journal_retention_days: int | None = 30
    heartbeat_interval_ms: int = 10_000  # node row refresh for the dashboard; 1000..3600000
    auto_migrate: bool = True  # init() applies pending schema migrations (under a DB lock)
    missed_lookback_ms: int = 86_400_000  # a gap in the cluster's ticks is journaled this far back; 60000..604800000
    groups: tuple[str, ...] = ()  # node groups this node serves: it runs tasks of these groups and ungrouped ones

    def __post_init__(self) -> None:
        check_id(self.node_id, "node_id")
        check_int(self.tick_interval_ms, "tick_interval_ms", 100, 60_000)
        check_int(self.lease_ms, "lease_ms", *LEASE_MS_RANGE)
        check_int(self.max_concurrency, "max_concurrency", 1, 1_000)
        check_int(self.max_queued, "max_queued", 0, 100_000)
        check_optional_int(self.max_logs, "max_logs", 1, 1_000_000_000)
        check_optional_int(self.retention_days, "retention_days", 1, 36_500)
        # at least 8: a gap scan or catch-up reaches 7 days back and must still find the rows it journaled
        check_optional_int(self.journal_retention_days, "journal_retention_days", 8, 36_500)
        check_int(self.heartbeat_interval_ms, "heartbeat_interval_ms", 1_000, 3_600_000)
        check_bool(self.auto_migrate, "auto_migrate")
        check_int(self.missed_lookback_ms, "missed_lookback_ms", 60_000, 7 * 86_400_000)
        if isinstance(self.groups, str) or not isinstance(self.groups, tuple | list):
            raise ConfigError("groups", "must be a list of group names")
        if len(self.groups) > MAX_GROUPS:
            raise ConfigError("groups", f"at most {MAX_GROUPS} groups")
        for index, group in enumerate(self.groups):
            check_group(group, f"groups[{index}]")
        object.__setattr__(self, "groups", tuple(sorted(set(self.groups))))

    @property
    def renew_interval_ms(self) -> int:
        return max(self.lease_ms // 3, 200)


def groups_from_text(value: str | None) -> tuple[str, ...]:
    """Node groups written as text (``HAI_NODE_GROUPS=billing,reports``): comma-separated names;
    SchedulerConfig checks each one."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())
