"""A task's policies: how it retries (``RetryPolicy``), what it does after downtime
(``CatchupPolicy``), and an operator's pause (``Pause``). Frozen values that check themselves
when made, so every door that builds one (Python, the form, the JSON API, a task file) refuses a
bad value with the same field and words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, TypeVar

from scheduler_core.errors import ConfigError
from scheduler_core.validation import check_choice, check_int

MAX_ATTEMPTS_RANGE = (1, 100)
BACKOFF_MAX_MS = 86_400_000  # one retry's wait, at most a day
P = TypeVar("P")


def _setting(cls: type[P], value: Any, field: str) -> P | None:
    """A settings value object from None, itself, or a mapping of its fields (an unknown key is
    refused by name; each field is checked by the class)."""
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"must be a mapping or {cls.__name__} (got {type(value).__name__})")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:
        raise ConfigError(f"{field}.{unknown[0][:40]}", f"is not a {field} setting")
    return cls(**value)




@dataclass(frozen=True)
class RetryPolicy:
    """How often a failing idempotent task is tried, and how long to wait in between."""

    max_attempts: int = 1  # 1..100, counting the first attempt and every takeover
    backoff_ms: tuple[int, ...] = ()  # wait before attempt n+1 is backoff_ms[min(n-1, len-1)]

    def __post_init__(self) -> None:
        check_int(self.max_attempts, "retry.max_attempts", *MAX_ATTEMPTS_RANGE)
        if not isinstance(self.backoff_ms, tuple | list):
            raise ConfigError("retry.backoff_ms",
                              f"must be a list of milliseconds (got {type(self.backoff_ms).__name__})")
        if len(self.backoff_ms) > MAX_ATTEMPTS_RANGE[1]:
            raise ConfigError("retry.backoff_ms", f"must hold at most {MAX_ATTEMPTS_RANGE[1]} delays")
        for index, value in enumerate(self.backoff_ms):
            check_int(value, f"retry.backoff_ms[{index}]", 0, BACKOFF_MAX_MS)
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
        return _setting(cls, value, "retry")


class CatchupMode(StrEnum):
    """What a node does with a task's occurrences that nobody ran while the cluster was down."""

    NONE = "none"  # journal them as missed
    LATEST = "latest"  # run the most recent one inside the window; the others are missed
    ALL = "all"  # run each one inside the window, in order, through the task's slot


CATCHUP_WINDOW_MAX_MS = 7 * 86_400_000


@dataclass(frozen=True)
class CatchupPolicy:
    """A task's catch-up after downtime: ``policy`` and how far back it reaches (``window_ms``)."""

    policy: CatchupMode = CatchupMode.NONE
    window_ms: int = 3_600_000  # occurrences older than this (before the first node came back) are missed

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", check_choice(self.policy, "catchup.policy", CatchupMode))
        check_int(self.window_ms, "catchup.window_ms", 0, CATCHUP_WINDOW_MAX_MS)

    def to_json(self) -> dict[str, Any]:
        return {"policy": str(self.policy), "window_ms": self.window_ms}

    @classmethod
    def parse(cls, value: CatchupPolicy | Mapping[str, Any] | None) -> CatchupPolicy | None:
        return _setting(cls, value, "catchup")


@dataclass(frozen=True)
class Pause:
    """A task paused by an operator: no cron occurrences until resumed (or ``until``)."""

    at: int  # DB-clock ms
    until: int | None  # resumes by itself at this DB-clock ms; None: until resume()
    by: str | None
    reason: str | None

    def active(self, now_ms: int) -> bool:
        return self.until is None or now_ms < self.until
