"""SchedulerConfig, RetryPolicy and hooks: every bad value names its field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import RetryPolicy, Scheduler, SchedulerConfig
from scheduler_core.errors import ConfigError
from scheduler_core.runtime.hooks import Hooks


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"lease_ms": 999}, "lease_ms"),
        ({"lease_ms": 86_400_001}, "lease_ms"),
        ({"lease_ms": "300000"}, "lease_ms"),
        ({"tick_interval_ms": 99}, "tick_interval_ms"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_queued": -1}, "max_queued"),
        ({"max_logs": 0}, "max_logs"),
        ({"retention_days": 0}, "retention_days"),
        ({"heartbeat_interval_ms": 10}, "heartbeat_interval_ms"),
        ({"node_id": ""}, "node_id"),
        ({"node_id": "n" * 129}, "node_id"),
        ({"auto_migrate": "yes"}, "auto_migrate"),
        ({"groups": "billing"}, "groups"),
        ({"groups": [""]}, "groups[0]"),
        ({"groups": ["ok", "g" * 65]}, "groups[1]"),
        ({"groups": ["tab\there"]}, "groups[0]"),
        ({"groups": [f"g{i}" for i in range(33)]}, "groups"),
        ({"missed_lookback_ms": 59_999}, "missed_lookback_ms"),
        ({"missed_lookback_ms": 8 * 86_400_000}, "missed_lookback_ms"),
    ],
)
def test_scheduler_config_bounds(values: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        SchedulerConfig(**values)
    assert info.value.field == field and info.value.code == "hai:scheduler:012"


def test_defaults_follow_the_seed() -> None:
    config = SchedulerConfig()
    assert (config.lease_ms, config.tick_interval_ms, config.renew_interval_ms) == (300_000, 1_000, 100_000)
    assert config.node_id


def test_retry_policy_backoff_schedule() -> None:
    policy = RetryPolicy.parse({"max_attempts": 4, "backoff_ms": [1000, 5000]})
    assert policy is not None
    assert [policy.delay_before(n) for n in (2, 3, 4)] == [1000, 5000, 5000]
    assert RetryPolicy().delay_before(2) == 0
    with pytest.raises(ConfigError) as info:
        RetryPolicy.parse([1, 2])  # type: ignore[arg-type]
    assert info.value.field == "retry"


def test_hooks_are_validated() -> None:
    with pytest.raises(ConfigError) as info:
        Hooks({"on_task_exec": print})
    assert info.value.field == "hooks.on_task_exec"
    with pytest.raises(ConfigError) as info:
        Hooks({"on_task_execute": 42})
    assert info.value.field == "hooks.on_task_execute"

    class AppHooks:
        def on_task_execute(self, event: Any) -> str:
            return "ok"

    assert Hooks(AppHooks()).on_task_execute is not None


def test_scheduler_refuses_a_foreign_config_object() -> None:
    with pytest.raises(ConfigError) as info:
        Scheduler(None, {"lease_ms": 1000})  # type: ignore[arg-type]
    assert info.value.field == "config"
