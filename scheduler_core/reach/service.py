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
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.db import pool_capacity, prepare_engine, upgrade
from scheduler_core.errors import (
    ConfigError,
    DeliveryRejectedError,
    DndBlockedError,
    ReachConfigError,
    ReachNotInitializedError,
    SchedulerError,
    SendFailedError,
    TemplateNotFoundError,
)
from scheduler_core.reach.alert_rules import parse_rules
from scheduler_core.reach.alerts import Alerts
from scheduler_core.reach.base import Provider, RenderedMessage
from scheduler_core.reach.config import DndConfig, QueuePolicy, ReachConfig, TemplateConfig
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.reach.messages import compose, message_team
from scheduler_core.reach.providers import build_providers
from scheduler_core.reach.queue import ROUND_LIMIT, DeliveryRounds, QueueOperations, RoundReport
from scheduler_core.reach.template_operations import TemplateOperations
from scheduler_core.store.reach_queue import QueueRepository
from scheduler_core.store.reach_templates import TemplateRepository
from scheduler_core.store.teams import TeamRepository
from scheduler_core.validation import ID_MAX, check_text

logger = logging.getLogger("scheduler_core.reach")
IMMEDIATE_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class SendResult:
    provider: str
    message_id: str | None  # the provider's id when delivered now
    deferred: bool = False  # held by do-not-disturb: queued, not yet delivered
    queue_id: str | None = None  # the durable receipt of a deferred message


class Reach:
    def __init__(self, engine: Engine | None, config: Mapping[str, Any], *, node_id: str | None = None,
                 environ: Mapping[str, str] | None = None, auto_migrate: bool = True, public_url: str = "") -> None:
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
        self.queue = QueueOperations(self._require_queue, lambda: self._require_config().dnd)
        self.templates = TemplateOperations(self)
        self.alerts = Alerts(self)
        self._public_url = check_text(public_url, "public_url", 2_048, ReachConfigError, blank=True)
        self._alert_lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------

    def init(self) -> None:
        config = ReachConfig.parse(self._raw_config)
        providers = build_providers(list(config.providers), self._environ)
        for template in config.templates:
            if template.provider not in providers:
                raise ReachConfigError(f"templates.{template.name}.provider",
                                       f"names no configured provider ({template.provider!r})")
        if config.dnd.enabled and config.dnd.strategy == "delay" and self._engine is None:
            raise ReachConfigError("dnd.strategy", "delay needs the database (its queue table holds the messages)")
        if self._engine is not None:
            _check_pool(self._engine, config.queue.concurrency, 0, "delivery rounds")
            self._prepare_database()
            self._queue_repo = QueueRepository(self._engine, self._node_id, config.queue.lease_ms)
            self._rounds = DeliveryRounds(self._queue_repo, lambda: self._providers, config.queue.concurrency)
        self._config, self._providers = config, providers
        try:
            self.alerts.configure(parse_rules(config.alerts), self._public_url)
        except ReachConfigError:
            self._config, self._providers = None, {}
            raise

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
        self.alerts.close()

    # --- sending ---------------------------------------------------------------------------

    def send(self, message: Mapping[str, Any]) -> SendResult:
        """Deliver now, or queue through do-not-disturb. ``team``: the team the message is about
        (a team here); its queued row is that team's to see and settle (none: global users')."""
        config = self._require_config()
        provider, rendered, template = compose(message, self._template, self._providers)
        team = message_team(message)
        if team is not None and team not in self._teams():
            raise ReachConfigError("team", f"names no team here: {team!r}")
        now_ms = self._now()
        if in_window(config.dnd, now_ms):
            if config.dnd.strategy == "discard":
                raise DndBlockedError("do-not-disturb is on: the message was discarded")
            return self._enqueue(provider, rendered, template, window_end_ms(config.dnd, now_ms), team)
        return self._deliver_now(provider, rendered)

    def _teams(self) -> set[str]:
        if self._engine is None:
            raise ReachConfigError("team", "needs the database: a message's team is where its queued row is seen")
        try:
            return {team.id for team in TeamRepository(self._engine).all()}
        except SchedulerError as exc:  # nothing was sent: a send's failure, as the queue's would be
            raise SendFailedError(f"the message's team could not be read: {exc}") from exc

    def find_template(self, name: Any) -> TemplateConfig:
        """A template by name: configuration first, then the database."""
        return self._template(name)

    def _template(self, name: Any) -> TemplateConfig:
        config = self._require_config()
        check_text(name, "template", ID_MAX, ReachConfigError)
        for template in config.templates:
            if template.name == name:
                return template
        if self._engine is not None:
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
                 not_before: int, team: str | None) -> SendResult:
        repo = self._require_queue()
        policy = self._require_config().queue
        queue_id = str(uuid.uuid4())
        try:
            repo.enqueue(queue_id, provider.name, template, message.to, message.subject, message.body,
                         message.extra, (policy.max_attempts, policy.retry_delay_ms, policy.max_retry_delay_ms),
                         not_before, team)
        except ConfigError as exc:  # the team was deleted since it was read: nothing was queued
            raise ReachConfigError("team", exc.message.removeprefix(f"{exc.field}: ")) from None
        except Exception as exc:  # never report a message as queued unless the row is committed
            raise SendFailedError(f"the message could not be queued: {exc}") from exc
        return SendResult(provider.name, None, deferred=True, queue_id=queue_id)

    # --- rounds -----------------------------------------------------------------------------------

    def run_round(self) -> RoundReport:
        """One delivery round now; at most one at a time per node. During do-not-disturb only
        urgent messages (alerts of rules that bypass it) are delivered."""
        if self._rounds is None:
            raise ReachNotInitializedError("reach has no database: there is no queue")
        config = self._require_config()
        with self._round_lock:
            return self._rounds.run(urgent_only=in_window(config.dnd, self._now()))

    def on_tick(self, now_ms: int) -> None:
        """Called by the scheduler node each tick: start a round once per minute, in the background;
        and when the alert probe (one statement) says something new happened, scan for alerts and
        deliver them at once, in the background too."""
        if self._rounds is None:
            return
        if not self._alert_lock.locked() and self._alerts_due():
            threading.Thread(target=self._alerts_in_background, name="hai-reach-alerts", daemon=True).start()
        minute = now_ms // 60_000
        if minute == self._last_round_minute or self._round_lock.locked():
            return
        self._last_round_minute = minute
        threading.Thread(target=self._round_in_background, name="hai-reach-round", daemon=True).start()

    def _alerts_due(self) -> bool:
        try:
            return self.alerts.due()
        except Exception:
            logger.warning("alert probe failed; the next tick asks again", exc_info=True)
            return False

    def _alerts_in_background(self) -> None:
        with self._alert_lock:
            try:
                if self.alerts.scan():
                    self._round_in_background()  # deliver what was raised now, not at the next minute
            except Exception:
                logger.warning("alert scan failed; the next tick retries", exc_info=True)

    def _round_in_background(self) -> None:
        """The minute's round, followed at once by further rounds while each one was full.

        Every round still claims at most ROUND_LIMIT rows with its own fixed eligibility time
        (a failing row is not re-claimed within its round and waits for its backoff), but a
        backlog -- thousands of messages held by a do-not-disturb window that just ended --
        drains at delivery speed instead of ROUND_LIMIT per minute per node.
        """
        try:
            while self._rounds is not None and self.run_round().claimed >= ROUND_LIMIT:
                pass
        except ReachNotInitializedError:
            return  # closed meanwhile
        except Exception:
            logger.warning("delivery round failed; the next minute retries", exc_info=True)

    def attach(self, scheduler: Any) -> None:
        """Run delivery rounds on ``scheduler``'s tick loop (no second scheduler). On the
        scheduler's own engine, its pool must hold the node's connections and the rounds'."""
        if self._config is not None and self._engine is not None and scheduler.engine is self._engine:
            # + 1: the alert probe's held line (one round trip per tick)
            _check_pool(self._engine, self._config.queue.concurrency, scheduler.connections_needed() + 1,
                        "the scheduler node, its alert probe and delivery rounds")
        scheduler.add_tick_listener(self.on_tick)

    # --- helpers ----------------------------------------------------------------------------------

    def _now(self) -> int:
        if self._queue_repo is not None:
            return self._queue_repo.now()
        return int(time.time() * 1000)  # no database: the DND window follows this host's clock

    def _require_config(self) -> ReachConfig:
        if self._config is None:
            raise ReachNotInitializedError("reach is not initialised; call init() first")
        return self._config

    def require_engine(self) -> Engine:
        return self._require_engine()

    def dnd(self) -> DndConfig:
        return self._require_config().dnd

    def queue_policy(self) -> QueuePolicy:
        return self._require_config().queue

    def _require_engine(self) -> Engine:
        self._require_config()
        if self._engine is None:
            raise ReachNotInitializedError("reach has no database: stored templates need one")
        return self._engine

    def provider_names(self) -> list[str]:
        return sorted(self._providers)

    def provider_snapshots(self) -> list[dict[str, Any]]:
        """Every configured provider's settings with its secrets masked, by name."""
        self._require_config()
        return [self._providers[name].snapshot() for name in sorted(self._providers)]

    def configured_templates(self) -> list[TemplateConfig]:
        return list(self._require_config().templates)

    def _require_queue(self) -> QueueRepository:
        self._require_config()
        if self._queue_repo is None:
            raise ReachNotInitializedError("reach has no database: there is no queue")
        return self._queue_repo


def _check_pool(engine: Engine, senders: int, others: int, users: str) -> None:
    """A round holds a connection for its claims and one per sender at most: refuse a pool that
    cannot give them (a sender starved of a connection past the acquire timeout leaves a sent
    message to recovery, which makes a plain provider's message ``unknown``)."""
    capacity = pool_capacity(engine)
    needed = others + senders + 1
    if capacity is not None and capacity < needed:
        raise ReachConfigError("queue.concurrency", f"{users} need a connection pool of at least {needed} "
                                                    f"(this engine's pool holds {capacity}); raise the pool size "
                                                    f"or lower queue.concurrency ({senders})")

