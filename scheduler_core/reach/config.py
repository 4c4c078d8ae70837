"""Validated notification configuration: DND window, queue retry policy, templates.

Bounds: max attempts 1..100 (default 5); retry delay and max retry delay
1000..86400000 ms (defaults 60000 / 3600000) with max >= first; backoff
``min(max_retry_delay, retry_delay * 2^(attempt-1))``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler_core.errors import ReachConfigError
from scheduler_core.validation import (
    ID_MAX,
    check_bool,
    check_int,
    check_optional_text,
    check_text,
    check_url_path,
    shown,
)

_WALL_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
DELAY_RANGE = (1_000, 86_400_000)
TEMPLATE_BODY_MAX = 65_535
TEMPLATE_SUBJECT_MAX = 998  # one RFC 5322 header line


def _keys(field: str, values: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    if not isinstance(values, Mapping):
        raise ReachConfigError(field, "must be a mapping")
    for key in values:
        if key not in allowed:
            raise ReachConfigError(f"{field}.{key}", "is not a setting here")


@dataclass(frozen=True)
class QueuePolicy:
    max_attempts: int = 5  # claims allowed, crash recoveries included; 1..100
    retry_delay_ms: int = 60_000  # first backoff; 1000..86400000
    max_retry_delay_ms: int = 3_600_000  # backoff cap; 1000..86400000, >= retry_delay_ms
    lease_ms: int = 60_000  # a round's claim on one message, renewed while sending
    concurrency: int = 4  # deliveries a node's round runs at once; 1..32 (not stored with messages)

    def __post_init__(self) -> None:
        check_int(self.max_attempts, "queue.max_attempts", 1, 100, ReachConfigError)
        check_int(self.retry_delay_ms, "queue.retry_delay_ms", *DELAY_RANGE, ReachConfigError)
        check_int(self.max_retry_delay_ms, "queue.max_retry_delay_ms", *DELAY_RANGE, ReachConfigError)
        check_int(self.lease_ms, "queue.lease_ms", *DELAY_RANGE, ReachConfigError)
        check_int(self.concurrency, "queue.concurrency", 1, 32, ReachConfigError)
        if self.max_retry_delay_ms < self.retry_delay_ms:
            raise ReachConfigError("queue.max_retry_delay_ms", "must not be smaller than queue.retry_delay_ms")

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None) -> QueuePolicy:
        values = values or {}
        _keys("queue", values, ("max_attempts", "retry_delay_ms", "max_retry_delay_ms", "lease_ms", "concurrency"))
        return cls(**values)


def backoff_ms(retry_delay_ms: int, max_retry_delay_ms: int, attempt: int) -> int:
    """``min(max, delay * 2^(attempt-1))`` for the attempt that just failed (1-based)."""
    return int(min(max_retry_delay_ms, retry_delay_ms * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True)
class DndConfig:
    enabled: bool = False
    strategy: str = "discard"  # discard (DND_BLOCKED) | delay (queued until the window ends)
    start: str = "22:00"  # wall time the window opens, HH:MM
    end: str = "08:00"  # wall time it closes; may cross midnight
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        check_bool(self.enabled, "dnd.enabled", ReachConfigError)
        if not isinstance(self.strategy, str) or self.strategy not in ("discard", "delay"):
            raise ReachConfigError("dnd.strategy", f"must be discard or delay (got {shown(self.strategy)})")
        for name in ("start", "end"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _WALL_TIME.match(value):
                raise ReachConfigError(f"dnd.{name}", f"must be a wall time HH:MM (got {shown(value)})")
        if self.start == self.end:
            raise ReachConfigError("dnd.end", "must differ from dnd.start")
        try:
            ZoneInfo(check_text(self.timezone, "dnd.timezone", 64, ReachConfigError))
        except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
            raise ReachConfigError("dnd.timezone", f"unknown IANA timezone {self.timezone!r}") from None

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None) -> DndConfig:
        values = values or {}
        _keys("dnd", values, ("enabled", "strategy", "start", "end", "timezone"))
        return cls(**values)


@dataclass(frozen=True)
class TemplateConfig:
    name: str
    provider: str
    body: str
    subject: str | None = None

    def __post_init__(self) -> None:
        # Also built from stored rows and re-read configuration: a name saved before the URL
        # rule existed stays readable (and deletable); only a template being saved must pass it.
        check_template(self.name, self.provider, self.body, self.subject, "templates.", saving=False)


def check_template(name: Any, provider: Any, body: Any, subject: Any, prefix: str = "", *,
                   saving: bool = True) -> None:
    """One template's fields, wherever it comes from (configuration, the API, a form); ``prefix``
    says where in the configuration (``templates.``) so the field named is the one to fix.
    ``saving``: the template is being stored, so its name must also be one a URL can carry."""
    check_template_name(name, f"{prefix}name", url_path=saving)
    where = f"{prefix}{name}." if prefix else ""
    check_text(provider, f"{where}provider", ID_MAX, ReachConfigError, single_line=True)
    check_text(body, f"{where}body", TEMPLATE_BODY_MAX, ReachConfigError)
    # One header line: a line break would let a variable-free subject inject mail headers.
    check_optional_text(subject, f"{where}subject", TEMPLATE_SUBJECT_MAX, ReachConfigError, single_line=True)


def check_template_name(name: Any, field: str = "name", *, url_path: bool = False) -> str:
    """A template's name: 1..128 printable characters without surrounding whitespace. With
    ``url_path`` (a template being saved) also one the dashboard's URLs can carry
    (``/notifications/templates/show/<name>``): no empty, ``.`` or ``..`` part between slashes."""
    check_text(name, field, ID_MAX, ReachConfigError)
    if name != name.strip() or not name.isprintable():
        raise ReachConfigError(field, "must be 1..128 printable characters without surrounding whitespace")
    if url_path:
        check_url_path(name, field, ReachConfigError)
    return name  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ReachConfig:
    providers: tuple[Mapping[str, Any], ...]
    templates: tuple[TemplateConfig, ...]
    dnd: DndConfig
    queue: QueuePolicy
    alerts: Any = None  # the "alerts" list as given (reach.alert_rules.parse_rules reads it)

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> ReachConfig:
        _keys("reach", values, ("providers", "templates", "dnd", "queue", "alerts"))
        providers = values.get("providers") or []
        templates = values.get("templates") or []
        if not isinstance(providers, list | tuple) or not isinstance(templates, list | tuple):
            raise ReachConfigError("providers", "providers and templates must be lists")
        parsed = []
        for index, item in enumerate(templates):
            _keys(f"templates[{index}]", item, ("name", "provider", "subject", "body"))
            parsed.append(TemplateConfig(**item))
        return cls(tuple(providers), tuple(parsed), DndConfig.parse(values.get("dnd")),
                   QueuePolicy.parse(values.get("queue")), values.get("alerts"))
