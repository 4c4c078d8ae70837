"""Validated scheduler configuration (bounds from the seeds)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.errors import ConfigError

LEASE_MS_RANGE = (1_000, 86_400_000)


def default_node_id() -> str:
    return f"{socket.gethostname()[:80]}-{os.getpid()}-{secrets.token_hex(3)}"


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(name, f"must be an integer between {low} and {high} (got {value!r})")


@dataclass(frozen=True)
class SchedulerConfig:
    """How one node behaves. One line per field:"""

    node_id: str = field(default_factory=default_node_id)  # unique per process; 1..128 chars
    tick_interval_ms: int = 1_000  # how often the node refreshes, scans and claims; 100..60000
    lease_ms: int = 300_000  # ownership lease, renewed about every lease/3; 1000..86400000
    max_concurrency: int = 6  # handlers running at once; 1..1000 (needs a pool of max_concurrency + 4)
    max_queued: int = 1_000  # claimed executions waiting for a worker; 0..100000
    max_logs: int | None = None  # retention: keep at most this many log rows; None = unlimited
    retention_days: int | None = None  # retention: drop log rows older than this; None = forever
    heartbeat_interval_ms: int = 10_000  # node row refresh for the dashboard; 1000..3600000
    auto_migrate: bool = True  # init() applies pending schema migrations (under a DB lock)

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id.strip() or len(self.node_id) > 128:
            raise ConfigError("node_id", "must be a non-empty string of at most 128 characters")
        _check_int("tick_interval_ms", self.tick_interval_ms, 100, 60_000)
        _check_int("lease_ms", self.lease_ms, *LEASE_MS_RANGE)
        _check_int("max_concurrency", self.max_concurrency, 1, 1_000)
        _check_int("max_queued", self.max_queued, 0, 100_000)
        if self.max_logs is not None:
            _check_int("max_logs", self.max_logs, 1, 1_000_000_000)
        if self.retention_days is not None:
            _check_int("retention_days", self.retention_days, 1, 36_500)
        _check_int("heartbeat_interval_ms", self.heartbeat_interval_ms, 1_000, 3_600_000)
        if not isinstance(self.auto_migrate, bool):
            raise ConfigError("auto_migrate", f"must be true or false (got {self.auto_migrate!r})")

    @property
    def renew_interval_ms(self) -> int:
        return max(self.lease_ms // 3, 200)
