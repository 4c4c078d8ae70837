"""Task definitions, executions, attempts and logs: plain frozen values.

Validation lives here so that every entry point (library, CLI, dashboard) refuses the same
bad input with the same error naming the same field, before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from scheduler_core.cron import validate_cron, validate_timezone
from scheduler_core.errors import ConfigError
from scheduler_core.secrets import mask_values, masked_handler

ID_MAX = 128
MAX_ATTEMPTS_RANGE = (1, 100)
MAX_SAFE_INTEGER = 2**53 - 1

Trigger = Literal["cron", "manual"]
# running: claimed and owned under a lease; the rest are terminal except unknown, which is
# terminal for the journal but keeps the task's slot until an operator resolves it.
ExecutionStatus = Literal["running", "success", "failed", "interrupted", "unknown", "discarded", "skipped"]
TERMINAL_STATUSES = ("success", "failed", "interrupted", "unknown", "discarded", "skipped")
LogPersistenceStatus = Literal["persisted", "pending", "unconfirmed"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failing idempotent task is tried, and how long to wait in between."""

    max_attempts: int = 1  # 1..100, counting the first attempt and every takeover
    backoff_ms: tuple[int, ...] = ()  # wait before attempt n+1 is backoff_ms[min(n-1, len-1)]

    def __post_init__(self) -> None:
        low, high = MAX_ATTEMPTS_RANGE
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not low <= self.max_attempts <= high:
            raise ConfigError("retry.max_attempts", f"must be an integer between {low} and {high} "
                                                    f"(got {self.max_attempts!r})")
        if isinstance(self.backoff_ms, str) or not isinstance(self.backoff_ms, tuple | list):
            raise ConfigError("retry.backoff_ms", f"must be a list of milliseconds (got {self.backoff_ms!r})")
        for index, value in enumerate(self.backoff_ms):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 86_400_000:
                raise ConfigError(f"retry.backoff_ms[{index}]", f"must be 0..86400000 ms (got {value!r})")
        object.__setattr__(self, "backoff_ms", tuple(self.backoff_ms))

    def delay_before(self, next_attempt: int) -> int:
        """Milliseconds to wait before attempt ``next_attempt`` (2, 3, ...)."""
        if not self.backoff_ms:
            return 0
        return self.backoff_ms[min(next_attempt - 2, len(self.backoff_ms) - 1)]

    def to_json(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff_ms": list(self.backoff_ms)}

    @classmethod
    def parse(cls, value: RetryPolicy | Mapping[str, Any] | None) -> RetryPolicy | None:
        if value is None or isinstance(value, RetryPolicy):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError("retry", f"must be a mapping or RetryPolicy (got {type(value).__name__})")
        unknown = set(value) - {"max_attempts", "backoff_ms"}
        if unknown:
            raise ConfigError(f"retry.{sorted(unknown)[0]}", "is not a retry setting")
        return cls(max_attempts=value.get("max_attempts", 1), backoff_ms=value.get("backoff_ms", ()))


@dataclass(frozen=True)
class TaskDefinition:
    """A scheduled task. Stored fields are filled in by the repository."""

    id: str  # 1..128 characters, unique
    name: str  # shown to operators
    cron: str  # five-field cron expression, matched per minute on the DB clock
    description: str | None = None
    timezone: str = "UTC"  # IANA zone the cron fields are read in; never the node's TZ
    enabled: bool = True
    delete_after_run: bool = False  # delete after the first success (matching revision)
    idempotent: bool = False  # only then: takeover after a dead owner, and retries
    retry: RetryPolicy | None = None  # None = one attempt
    handler: Mapping[str, Any] | None = None  # {"kind": "hook" | "api" | ...}; None = host hook
    params: Mapping[str, Any] | None = None  # JSON object handed to the handler
    revision: int = 0  # stored: incremented by every change
    created_at: int | None = None  # stored: DB-clock ms
    updated_at: int | None = None  # stored: DB-clock ms; the version operators compare-and-set

    @property
    def max_attempts(self) -> int:
        return self.retry.max_attempts if self.retry else 1

    @property
    def handler_kind(self) -> str:
        return str(self.handler.get("kind", "hook")) if self.handler else "hook"

    def schedule_key(self) -> tuple[str, str, bool]:
        """What decides whether a minute is due; a change of it 'reschedules' the task."""
        return (self.cron, self.timezone, self.enabled)

    def masked(self) -> dict[str, Any]:
        """The definition as a dict fit for display: secrets in handler and params masked."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["handler"] = masked_handler(self.handler)
        data["params"] = mask_values(self.params)
        data["retry"] = self.retry.to_json() if self.retry else None
        return data

    def __repr__(self) -> str:  # never print a secret header or token in a log line
        shown = ", ".join(f"{k}={v!r}" for k, v in self.masked().items())
        return f"TaskDefinition({shown})"

    def same_definition(self, other: TaskDefinition) -> bool:
        """Equal in everything a user declares (ignores revision and timestamps)."""
        stored = ("revision", "created_at", "updated_at")
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.name not in stored)


def _refuse_nul(value: str, field_name: str) -> None:
    """NUL cannot be stored in PostgreSQL text or JSON: refused here, never a database error."""
    if "\x00" in value:
        raise ConfigError(field_name, "must not contain NUL characters")


def validate_id(value: Any, field_name: str = "id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, "must be a non-empty string")
    _refuse_nul(value, field_name)
    if len(value) > ID_MAX:
        raise ConfigError(field_name, f"must be at most {ID_MAX} characters (got {len(value)})")
    return value


def validate_optional_text(value: Any, field_name: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, "must be a non-empty string or None")
    if len(value) > limit:
        raise ConfigError(field_name, f"must be at most {limit} characters (got {len(value)})")
    _refuse_nul(value, field_name)
    return value


def _check_json(value: Any, field_name: str) -> None:
    """Refuse what the JSON columns cannot store faithfully (NaN, sets, objects, ...)."""
    if isinstance(value, str):
        _refuse_nul(value, field_name)
        return
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise ConfigError(field_name, "integers beyond 2**53-1 do not survive JSON")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(field_name, "NaN and infinity are not JSON")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json(item, f"{field_name}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(field_name, f"object keys must be strings (got {key!r})")
            _refuse_nul(key, field_name)
            _check_json(item, f"{field_name}.{key}")
        return
    raise ConfigError(field_name, f"{type(value).__name__} is not JSON")


def _check_bool(value: Any, field_name: str) -> None:
    if not isinstance(value, bool):
        raise ConfigError(field_name, f"must be true or false (got {value!r})")


def validate_task(task: TaskDefinition, handler_validator: Any = None) -> TaskDefinition:
    """Return the task normalised, or raise ConfigError / InvalidCronError naming the field."""
    validate_id(task.id)
    if not isinstance(task.name, str) or not task.name.strip() or len(task.name) > 255:
        raise ConfigError("name", "must be a non-empty string of at most 255 characters")
    _refuse_nul(task.name, "name")
    description = validate_optional_text(task.description, "description", 10_000)
    cron = validate_cron(task.cron)
    timezone = validate_timezone(task.timezone)
    for name in ("enabled", "delete_after_run", "idempotent"):
        _check_bool(getattr(task, name), name)
    retry = RetryPolicy.parse(task.retry)
    if task.params is not None and not isinstance(task.params, Mapping):
        raise ConfigError("params", "must be a JSON object (mapping) or None")
    _check_json(task.params, "params")
    handler = task.handler
    if handler is not None:
        if not isinstance(handler, Mapping):
            raise ConfigError("handler", "must be a mapping with a 'kind', or None")
        _check_json(handler, "handler")
        handler = handler_validator(handler) if handler_validator else dict(handler)
    return replace(task, description=description, cron=cron, timezone=timezone, retry=retry,
                   params=dict(task.params) if task.params is not None else None, handler=handler)


UNSET: Any = object()  # "omitted" in update_task: leaves a field unchanged
UPDATABLE_FIELDS = ("name", "cron", "description", "timezone", "enabled", "delete_after_run", "idempotent",
                    "retry", "handler", "params")


def task_from_mapping(values: Mapping[str, Any]) -> TaskDefinition:
    """Build a TaskDefinition from a plain mapping (e.g. parsed JSON); unknown keys are errors."""
    allowed = {f.name for f in fields(TaskDefinition)}
    for key in values:
        if key not in allowed:
            raise ConfigError(str(key), "is not a task field")
    for required in ("id", "name", "cron"):
        if required not in values:
            raise ConfigError(required, "is required")
    return TaskDefinition(**dict(values))


@dataclass(frozen=True)
class Attempt:
    """One attempt of an execution, as the journal keeps it."""

    log_id: str  # stable UUID; the primary key of its log row
    attempt: int  # 1-based number within the execution's budget
    sequence: int  # ownership generation that ran it
    node_id: str
    started_at: int  # DB-clock ms
    finished_at: int | None = None
    status: str | None = None  # None while running
    error: str | None = None
    result: Any = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        return cls(**values)


@dataclass(frozen=True)
class Execution:
    """A journal row: one occurrence (cron minute or manual trigger) and what became of it."""

    occurrence_id: str
    task_id: str
    task_revision: int
    trigger: Trigger
    source: str | None
    idempotency_key: str | None
    scheduled_minute: int | None  # UTC minute start (ms) of a cron occurrence
    status: ExecutionStatus
    reason: str | None  # why skipped / interrupted / unknown (slot_busy, lease_expired, ...)
    sequence: int  # 1 for the first owner, +1 per takeover
    attempt: int  # attempts begun so far
    max_attempts: int  # the stored budget
    execution_token: str | None
    owner_node: str | None
    lease_until: int | None
    attempts: tuple[Attempt, ...]
    log_persistence: str | None
    resolved_by: str | None
    resolution_reason: str | None
    created_at: int
    updated_at: int

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class LogPersistence:
    """Whether the attempt's log row is known to be written."""

    status: LogPersistenceStatus
    error: str | None = None


@dataclass(frozen=True)
class ExecutionLog:
    """One attempt as operators read it: the log row, or what trigger() returns."""

    id: str
    occurrence_id: str
    task_id: str
    trigger: str
    source: str | None
    status: str
    sequence: int
    attempt: int
    node_id: str | None
    started_at: int | None
    finished_at: int | None
    duration_ms: int | None
    error: str | None
    result: Any
    persistence: LogPersistence = field(default=LogPersistence("persisted"))
