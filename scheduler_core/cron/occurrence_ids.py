"""Occurrence ids: the same id for the same occurrence on every node, so it is claimed once.

A cron occurrence's id is a UUID5 of the task id and the minute; a manual trigger's, of the
task id and its idempotency key; without a key, a random UUID4. The namespace is fixed
forever.
"""

from __future__ import annotations

import os
import threading
import uuid

from scheduler_core.cron.fire_times import check_minute

__all__ = ["OCCURRENCE_NAMESPACE", "cron_occurrence_id", "manual_occurrence_id", "new_occurrence_id", "random_id"]

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
    return random_id()


_RANDOM_BATCH = 256  # ids drawn from one os.urandom call
_random_lock = threading.Lock()
_random_bytes = b""
_random_at = 0


def random_id() -> str:
    """A random UUID4 string, as ``str(uuid.uuid4())``, from the same source (``os.urandom``)
    but one system call per 256 ids: ``os.urandom`` releases the GIL, and a thread that releases
    it in a loop (an attempt id for each of a claim's 200 runners) waits to get it back each
    time, behind every other thread of the node (bench/PROFILE.md, seventh round). A forked
    child starts with no buffered bytes, so no two processes hand out the same id."""
    global _random_bytes, _random_at
    with _random_lock:
        if _random_at >= len(_random_bytes):
            _random_bytes, _random_at = os.urandom(16 * _RANDOM_BATCH), 0
        chunk = _random_bytes[_random_at:_random_at + 16]
        _random_at += 16
    return str(uuid.UUID(bytes=chunk, version=4))


def _forget_random_bytes() -> None:
    global _random_bytes, _random_at, _random_lock
    _random_bytes, _random_at, _random_lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_random_bytes)


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
