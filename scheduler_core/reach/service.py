"""``Reach``: send notifications now, or hold them durably through do-not-disturb.

    reach = Reach(engine, {"providers": [...], "templates": [...], "dnd": {...}, "queue": {...}})
    reach.init()
    result = reach.send({"template": "otp_email", "to": "a@example.com", "vars": {"code": "123456"}})
    reach.attach(scheduler)   # delivery rounds run on the scheduler node's tick

``send`` outside the window delivers at once and raises on failure. Inside it, ``discard``
raises DND_BLOCKED and ``delay`` returns ``deferred=True`` with a ``queue_id`` -- only after
the pending row is committed; a database failure is an error, never a fake success.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.db import prepare_engine, upgrade
from scheduler_core.errors import (
    DeliveryRejectedError,
    DndBlockedError,
    ProviderNotFoundError,
    ReachConfigError,
    ReachNotInitializedError,
    SendFailedError,
    TemplateNotFoundError,
)
from scheduler_core.reach.base import Provider, RenderedMessage
from scheduler_core.reach.config import ReachConfig, TemplateConfig
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.reach.queue import DeliveryRounds, QueueOperations, RoundReport
from scheduler_core.reach.templates import check_vars, render
from scheduler_core.store.reach_queue import QueueRepository, TemplateRepository

logger = logging.getLogger("scheduler_core.reach")
MESSAGE_FIELDS = ("to", "provider", "template", "subject", "body", "vars", "extra")
IMMEDIATE_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class SendResult:
    provider: str
    message_id: str | None  # the provider's id when delivered now
    deferred: bool = False  # held by do-not-disturb: queued, not yet delivered
    queue_id: str | None = None  # the durable receipt of a deferred message


class Reach:
    def __init__(self, engine: Engine | None, config: Mapping[str, Any], *, node_id: str | None = None,
                 environ: Mapping[str, str] | None = None, auto_migrate: bool = True) -> None:
        self._engine = engine
        self._raw_config = config
        self._node_id = node_id or f"reach-{uuid.uuid4().hex[:8]}"
        self._environ = environ
        self._auto_migrate = auto_migrate
        self._config: ReachConfig | None = None
        self._providers: dict[str, Provider] = {}
        self._queue_repo: QueueRepository | None = None
        self._rounds: DeliveryRounds | None = None
        self._round_lock = threading.Lock()
        self._last_round_minute: int | None = None
        self.queue = QueueOperations(self._require_queue)
        self.templates = TemplateOperations(self)

    # --- lifecycle ---------------------------------------------------------------------

    def init(self) -> None:
        from scheduler_core.reach.providers import build_providers

        config = ReachConfig.parse(self._raw_config)
        providers = build_providers(list(config.providers), self._environ)
        for template in config.templates:
            if template.provider not in providers:
                raise ReachConfigError(f"templates.{template.name}.provider",
                                       f"names no configured provider ({template.provider!r})")
        if config.dnd.enabled and config.dnd.strategy == "delay" and self._engine is None:
            raise ReachConfigError("dnd.strategy", "delay needs the database (its queue table holds the messages)")
        if self._engine is not None:
            self._prepare_database()
            self._queue_repo = QueueRepository(self._engine, self._node_id, config.queue.lease_ms)
            self._rounds = DeliveryRounds(self._queue_repo, lambda: self._providers)
        self._config, self._providers = config, providers

    def _prepare_database(self) -> None:
        assert self._engine is not None
        prepare_engine(self._engine)
        try:
            if self._auto_migrate:
                upgrade(self._engine)
            QueueRepository(self._engine, self._node_id, 1000).now()
        except Exception as exc:
            raise ReachConfigError("database", f"the queue table is not available: {exc}") from exc

    @property
    def is_initialized(self) -> bool:
        return self._config is not None

    @property
    def config(self) -> dict[str, Any]:
        """A snapshot with every provider secret masked."""
        config = self._require_config()
        return {"providers": [p.snapshot() for p in self._providers.values()],
                "templates": [t.name for t in config.templates], "dnd": vars(config.dnd).copy(),
                "queue": vars(config.queue).copy()}

    def close(self) -> None:
        with self._round_lock:
            self._config, self._providers, self._queue_repo, self._rounds = None, {}, None, None

    # --- sending ---------------------------------------------------------------------------

    def send(self, message: Mapping[str, Any]) -> SendResult:
        config = self._require_config()
        provider, rendered, template = self._prepare(message)
        now_ms = self._now()
        if in_window(config.dnd, now_ms):
            if config.dnd.strategy == "discard":
                raise DndBlockedError("do-not-disturb is on: the message was discarded")
            return self._enqueue(provider, rendered, template, window_end_ms(config.dnd, now_ms))
        return self._deliver_now(provider, rendered)

    def _prepare(self, message: Mapping[str, Any]) -> tuple[Provider, RenderedMessage, str | None]:
        if not isinstance(message, Mapping):
            raise ReachConfigError("message", "must be a mapping")
        for key in message:
            if key not in MESSAGE_FIELDS:
                raise ReachConfigError(str(key), "is not a message field")
        to = message.get("to")
        if not isinstance(to, str) or not to.strip():
            raise ReachConfigError("to", "is required")
        extra = message.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise ReachConfigError("extra", "must be a mapping")
        template_name = message.get("template")
        subject, body, provider_name = message.get("subject"), message.get("body"), message.get("provider")
        if template_name is not None:
            template = self._template(template_name)
            values = check_vars(message.get("vars"))
            provider_name = provider_name or template.provider
            subject = render(template.subject, values, f"template {template.name} subject") if template.subject \
                else subject
            body = render(template.body, values, f"template {template.name} body")
        elif not isinstance(body, str) or not body:
            raise ReachConfigError("body", "is required for a message without a template")
        if not isinstance(provider_name, str) or not provider_name:
            raise ReachConfigError("provider", "is required for a message without a template")
        provider = self._providers.get(provider_name)
        if provider is None:
            raise ProviderNotFoundError(f"provider {provider_name!r} is not configured")
        provider.validate_recipient(to)
        return provider, RenderedMessage(to, subject, str(body), dict(extra)), template_name

    def find_template(self, name: Any) -> TemplateConfig:
        """A template by name: configuration first, then the database."""
        return self._template(name)

    def _template(self, name: Any) -> TemplateConfig:
        config = self._require_config()
        for template in config.templates:
            if template.name == name:
                return template
        if self._engine is not None and isinstance(name, str):
            stored = TemplateRepository(self._engine).get(name)
            if stored is not None:
                return TemplateConfig(stored.name, stored.provider, stored.body, stored.subject)
        raise TemplateNotFoundError(f"template {name!r} not found")

    def _deliver_now(self, provider: Provider, message: RenderedMessage) -> SendResult:
        delivery = provider.send(message, None, IMMEDIATE_TIMEOUT_MS)
        if delivery.sent:
            return SendResult(provider.name, delivery.message_id)
        details = {"failure_class": delivery.failure_class, "started": delivery.started}
        if delivery.failure_class == "permanent_rejection":
            raise DeliveryRejectedError(f"{provider.name} refused the message: {delivery.error}", **details)
        raise SendFailedError(f"{provider.name} did not deliver: {delivery.error}", **details)

    def _enqueue(self, provider: Provider, message: RenderedMessage, template: str | None,
                 not_before: int) -> SendResult:
        repo = self._require_queue()
        policy = self._require_config().queue
        queue_id = str(uuid.uuid4())
        try:
            repo.enqueue(queue_id, provider.name, template, message.to, message.subject, message.body,
                         message.extra, (policy.max_attempts, policy.retry_delay_ms, policy.max_retry_delay_ms),
                         not_before)
        except Exception as exc:  # never report a message as queued unless the row is committed
            raise SendFailedError(f"the message could not be queued: {exc}") from exc
        return SendResult(provider.name, None, deferred=True, queue_id=queue_id)

    # --- rounds -----------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        """One delivery round now (outside do-not-disturb); at most one at a time per node."""
        if self._rounds is None:
            raise ReachNotInitializedError("reach has no database: there is no queue")
        config = self._require_config()
        if in_window(config.dnd, self._now()):
            return RoundReport()
        with self._round_lock:
            return self._rounds.run()

    def on_tick(self, now_ms: int) -> None:
        """Called by the scheduler node each tick: start a round once per minute, in the background."""
        minute = now_ms // 60_000
        if self._rounds is None or minute == self._last_round_minute or self._round_lock.locked():
            return
        self._last_round_minute = minute
        threading.Thread(target=self._round_in_background, name="hai-reach-round", daemon=True).start()

    def _round_in_background(self) -> None:
        try:
            self.run_round()
        except Exception:
            logger.warning("delivery round failed; the next minute retries", exc_info=True)

    def attach(self, scheduler: Any) -> None:
        """Run delivery rounds on ``scheduler``'s tick loop (no second scheduler)."""
        scheduler.add_tick_listener(self.on_tick)

    # --- helpers ----------------------------------------------------------------------------------

    def _now(self) -> int:
        if self._queue_repo is not None:
            return self._queue_repo.now()
        import time

        return int(time.time() * 1000)  # no database: the DND window follows this host's clock

    def _require_config(self) -> ReachConfig:
        if self._config is None:
            raise ReachNotInitializedError("reach is not initialised; call init() first")
        return self._config

    def _require_engine(self) -> Engine:
        self._require_config()
        if self._engine is None:
            raise ReachNotInitializedError("reach has no database: stored templates need one")
        return self._engine

    def provider_names(self) -> list[str]:
        return sorted(self._providers)

    def _require_queue(self) -> QueueRepository:
        self._require_config()
        if self._queue_repo is None:
            raise ReachNotInitializedError("reach has no database: there is no queue")
        return self._queue_repo


class TemplateOperations:
    """``reach.templates``: stored templates (CRUD) and previews of any template."""

    def __init__(self, reach: Reach) -> None:
        self._reach = reach

    def save(self, name: str, provider: str, body: str, subject: str | None = None) -> TemplateConfig:
        template = TemplateConfig(name=name, provider=provider, body=body, subject=subject)  # validates
        if provider not in self._reach.provider_names():
            raise ReachConfigError("provider", f"names no configured provider ({provider!r})")
        TemplateRepository(self._reach._require_engine()).save(name, provider, subject, body)
        return template

    def get(self, name: str) -> TemplateConfig:
        return self._reach.find_template(name)

    def list(self) -> list[TemplateConfig]:
        stored = TemplateRepository(self._reach._require_engine()).list()
        return [TemplateConfig(t.name, t.provider, t.body, t.subject) for t in stored]

    def delete(self, name: str) -> None:
        if not TemplateRepository(self._reach._require_engine()).delete(name):
            raise TemplateNotFoundError(f"template {name!r} not found")

    def preview(self, name: str, values: Mapping[str, Any]) -> tuple[str | None, str]:
        """Render without sending; TEMPLATE_RENDER_FAILED names every missing variable."""
        template = self._reach.find_template(name)
        checked = check_vars(values)
        subject = render(template.subject, checked, f"template {name} subject") if template.subject else None
        return subject, render(template.body, checked, f"template {name} body")
