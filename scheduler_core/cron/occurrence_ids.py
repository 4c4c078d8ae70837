"""Occurrence ids: the same id for the same occurrence on every node, so it is claimed once.

A cron occurrence's id is a UUID5 of the task id and the minute; a manual trigger's, of the
task id and its idempotency key; without a key, a random UUID4. The namespace is fixed
forever.
"""

from __future__ import annotations

import uuid

from scheduler_core.cron.fire_times import check_minute

__all__ = ["OCCURRENCE_NAMESPACE", "cron_occurrence_id", "manual_occurrence_id", "new_occurrence_id"]

# Fixed forever: changing it would give every cron occurrence a new id, so a rolling
# upgrade would run the same minute twice.
OCCURRENCE_NAMESPACE = uuid.UUID("e938f54a-deb7-4158-bc5d-9d22ef741604")


def cron_occurrence_id(task_id: str, minute_ms: int) -> str:
    """The id of a task's cron occurrence at a minute: the same on every node."""
    _check_text(task_id, "task_id")
    check_minute(minute_ms, "minute_ms")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"cron\x00{task_id}\x00{minute_ms}"))


def manual_occurrence_id(task_id: str, idempotency_key: str) -> str:
    """The id of a manual trigger: retries with the same idempotency key get the same id."""
    _check_text(task_id, "task_id")
    _check_text(idempotency_key, "idempotency_key")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, f"manual\x00{task_id}\x00{idempotency_key}"))


def new_occurrence_id() -> str:
    """A fresh random occurrence id (a manual trigger without an idempotency key)."""
    return str(uuid.uuid4())


def _check_text(value: str, name: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    # NUL separates the parts hashed into an id; allowing it would let two different
    # (task_id, key) pairs hash the same text.
    if not value or "\x00" in value:
        raise ValueError(f"{name} must be a non-empty string without NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not encodable as UTF-8") from exc
