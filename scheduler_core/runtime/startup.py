"""What a scheduler checks before it starts: a connection pool large enough for a node, a
schema at head (migrated, unless ``auto_migrate`` is off), and the tasks declared in code."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.config import SchedulerConfig
from scheduler_core.db import migration_state, pool_capacity, upgrade
from scheduler_core.errors import ConfigError, InitFailedError, TaskAlreadyExistsError
from scheduler_core.model import TaskDefinition, validate_task

RESERVED_CONNECTIONS = 4  # the tick's held line and its pooled work, lease keeper, one trigger()/operator caller


def connections_needed(config: SchedulerConfig) -> int:
    """The connections a node may hold at once: one per handler thread, plus the tick's held line
    and its pooled work, the lease keeper and one operator call."""
    return config.max_concurrency + RESERVED_CONNECTIONS


def check_pool(engine: Engine, config: SchedulerConfig) -> None:
    """Every handler thread, the tick and the lease keeper may hold a connection at once.

    A smaller pool starves the lease keeper under load, and leases then run out while their
    owners are alive: refuse it up front.
    """
    available = pool_capacity(engine)
    needed = connections_needed(config)
    if available is not None and available < needed:
        raise ConfigError("max_concurrency", f"{config.max_concurrency} handler threads need a connection "
                                             f"pool of at least {needed} (this engine's pool holds {available}); "
                                             "raise the pool size or lower max_concurrency")


def migrate(engine: Engine, config: SchedulerConfig) -> None:
    if config.auto_migrate:
        upgrade(engine)
    elif not migration_state(engine).up_to_date:
        raise InitFailedError("the database schema is not up to date; run `hai-scheduler db upgrade`")


def validated_declared(declared: Iterable[Any],
                       validate_handler: Callable[[Mapping[str, Any]], dict[str, Any]]) -> list[TaskDefinition]:
    """The tasks declared in code, each validated; one id declared twice is refused."""
    seen: set[str] = set()
    result = []
    for task in declared:
        if not isinstance(task, TaskDefinition):
            raise ConfigError("tasks", "must be TaskDefinition objects")
        valid = validate_task(task, validate_handler)
        if valid.id in seen:
            raise TaskAlreadyExistsError(f"task {valid.id!r} is declared twice", task_id=valid.id)
        seen.add(valid.id)
        result.append(valid)
    return result
