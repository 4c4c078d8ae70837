"""Alerts: the scheduler tells people, through its own delivery queue, when something needs them.

Detection rides on the node's tick: one probe statement tells whether any detector has something
new; only then do the detectors read (in the background, with the delivery round that follows;
the detectors, which turn rows into facts, are reach/alert_detectors.py's).
Each fact has a stable key; ``AlertRepository.raise_alert`` records it per rule and queues the
alert in one transaction, so a fact alerts once whatever node sees it, and however often
(docs/semantics.md, "Alerts").
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.tables import ID_LENGTH
from scheduler_core.errors import ConfigError, ReachConfigError, ReachError, TemplateNotFoundError
from scheduler_core.reach.alert_detectors import ClusterIdle, Detectors, Fact
from scheduler_core.reach.alert_rules import ALERT_VARIABLES, AlertEvent, AlertRule
from scheduler_core.reach.config import DndConfig, QueuePolicy, TemplateConfig
from scheduler_core.reach.dnd import in_window, window_end_ms
from scheduler_core.reach.templates import render, variables
from scheduler_core.store.alerts import AlertMessage, AlertRepository, Probe, RaisedAlert
from scheduler_core.store.transactions import AutocommitLine
from scheduler_core.validation import check_int, check_ms, check_optional_text

logger = logging.getLogger("scheduler_core.reach.alerts")
LINGER_EVERY_MS = 60_000  # the detectors of lasting conditions run at most this often
STORED_RULES_TTL_S = 15.0


class AlertsHost(Protocol):
    """What alerts need of the notification service that owns them (``Reach``), declared here
    so that this module does not import reach/service.py, which imports it."""

    def require_engine(self) -> Engine: ...

    def find_template(self, name: Any) -> TemplateConfig: ...

    def provider_names(self) -> list[str]: ...

    def dnd(self) -> DndConfig: ...

    def queue_policy(self) -> QueuePolicy: ...


class Alerts:
    """``reach.alerts``: rules (configured and stored), detection, a test alert, the list."""

    def __init__(self, reach: AlertsHost) -> None:
        self._reach = reach
        self._configured: tuple[AlertRule, ...] = ()
        self._stored: tuple[AlertRule, ...] = ()
        self._stored_at = 0.0
        self._lock = threading.Lock()
        self._seen: dict[str, int | None] = {}  # what the last probe said, per detector
        self._lingered_at = 0
        self._probe: Probe | None = None  # the last probe (due() reads it; scan() starts from it)
        self._idle_raised: set[tuple[str, str]] = set()  # (rule, key) this process has raised
        self._line: AutocommitLine | None = None  # the tick's probe: one round trip (made on first use)
        self._closed = False
        self.public_url = ""
        self._detectors = Detectors(self._repo, self._link)

    def configure(self, rules: tuple[AlertRule, ...], public_url: str) -> None:
        for rule in rules:
            self.check(rule)
        self._configured, self.public_url = rules, public_url.rstrip("/")
        self._closed = False

    def close(self) -> None:
        """Give the probe's held connection back to the pool."""
        with self._lock:
            line, self._line, self._closed = self._line, None, True
        if line is not None:
            line.close()

    def _repo(self) -> AlertRepository:
        return AlertRepository(self._reach.require_engine())

    def _link(self, path: str) -> str:
        return f"{self.public_url}{path}" if self.public_url else path

    # --- rules ---------------------------------------------------------------------------------

    def rules(self, scope: Scope = EVERY_TEAM) -> list[AlertRule]:
        """Configured rules, then stored ones (read again at most every few seconds); with a
        team ``scope``, only the rules of its teams (a global rule is every team's: not theirs)."""
        every = [*self._configured, *self._stored_rules()]
        return every if scope.teams is None else [r for r in every if r.team is not None and r.team in scope.teams]

    def configured(self) -> tuple[AlertRule, ...]:
        """The rules of the configuration (read-only)."""
        return self._configured

    def _stored_rules(self) -> tuple[AlertRule, ...]:
        now = time.monotonic()
        if now - self._stored_at > STORED_RULES_TTL_S:
            stored = []
            for row in self._repo().rules():
                try:
                    stored.append(AlertRule.parse({**row.definition, "name": row.name, "team": row.team},
                                                  f"alerts.{row.name}"))
                except ReachConfigError:
                    logger.warning("stored alert rule %r is unreadable; it raises nothing", row.name, exc_info=True)
            self._stored, self._stored_at = tuple(stored), now
        return self._stored

    def check(self, rule: AlertRule) -> None:
        """The rule names a template and provider that exist, and the template uses only the
        alert variables: a typo is refused when the rule is made, not when something breaks."""
        where = f"alerts.{rule.name}"
        try:
            template = self._reach.find_template(rule.template)
        except TemplateNotFoundError:
            raise ReachConfigError(f"{where}.template", f"names no template ({rule.template!r})") from None
        unknown = sorted((variables(template.body) | variables(template.subject)) - set(ALERT_VARIABLES))
        if unknown:
            raise ReachConfigError(f"{where}.template", f"{rule.template!r} uses {', '.join(unknown)}: alert "
                                                        f"templates may use {', '.join(ALERT_VARIABLES)}")
        provider = rule.provider or template.provider
        if provider not in self._reach.provider_names():
            raise ReachConfigError(f"{where}.provider", f"names no configured provider ({provider!r})")

    def save_rule(self, definition: dict[str, Any], expected_updated_at: int | None = None,
                  scope: Scope = EVERY_TEAM) -> AlertRule:
        """Store a rule (new, or at the version read); the same checks as a configured one, and
        its team must exist. An edit applies only to a rule of ``scope``'s teams (the caller's:
        a rule of another team is one that changed or is gone)."""
        rule = AlertRule.parse(definition)
        if expected_updated_at is not None:
            check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        if any(r.name == rule.name for r in self._configured):
            raise ReachConfigError("alerts.name", f"{rule.name!r} is a configured rule (read-only)")
        self.check(rule)
        stored = {k: v for k, v in rule.to_json().items() if k not in ("name", "team")}
        try:
            saved = self._repo().save_rule(rule.name, rule.team, stored, expected_updated_at, scope)
        except ConfigError as exc:  # the team is not there (any more)
            raise ReachConfigError(f"alerts.{rule.name}.team", exc.message.removeprefix(f"{exc.field}: ")) from None
        if not saved:
            raise ReachError(f"alert rule {rule.name!r} exists already, or changed since it was read",
                             rule=rule.name, conflict=True)
        self._stored_at = 0.0
        return rule

    def delete_rule(self, name: str, expected_updated_at: int, scope: Scope = EVERY_TEAM) -> None:
        check_optional_text(name, "name", 128, ReachConfigError)
        check_ms(expected_updated_at, "expected_updated_at", ReachConfigError)
        if not self._repo().delete_rule(name, expected_updated_at, scope):
            raise ReachError(f"alert rule {name!r} changed since it was read, or is gone", rule=name, conflict=True)
        self._stored_at = 0.0

    def stored_versions(self) -> dict[str, int]:
        """Each stored rule's ``updated_at`` (what an edit or delete compares with)."""
        return {row.name: row.updated_at for row in self._repo().rules()}

    # --- detection -------------------------------------------------------------------------------

    def due(self) -> bool:
        """One statement: whether a detector has something new (the tick's question)."""
        if not self.rules():
            return False
        with self._lock:
            if self._closed:
                return False
            if self._line is None:
                self._line = AutocommitLine(self._reach.require_engine())
            line = self._line
        probe = self._repo().probe(line)
        changed = self._changed(probe)
        self._probe = probe
        return changed

    def _changed(self, probe: Probe) -> bool:
        latest = {"journal": probe.journal_latest, "dead": probe.dead_latest, "gap": probe.last_gap_from,
                  "clock": probe.clock_jump_latest, "paused": probe.paused_latest}
        new = any(self._seen.get(name, -1) != value for name, value in latest.items())
        self._seen.update(latest)
        lasting = [probe.oldest_pending_log, probe.oldest_unknown, probe.oldest_running, probe.oldest_heartbeat]
        soonest = min((r.after_ms for r in self.rules()), default=None)
        lingering = soonest is not None and any(v is not None and v < probe.now_ms - soonest for v in lasting)
        return new or (lingering and probe.now_ms - self._lingered_at >= LINGER_EVERY_MS)

    def scan(self) -> int:
        """Read what is new and raise an alert per fact and rule; returns how many were queued."""
        with self._lock:
            probe, self._probe = self._probe or self._repo().probe(), None
            rules = self.rules()
            facts = self._detectors.changes(probe, rules)
            if probe.now_ms - self._lingered_at >= LINGER_EVERY_MS:
                facts += self._detectors.lasting(probe, rules)
                self._lingered_at = probe.now_ms
            return sum(self._raise(fact, rule, probe.now_ms) for fact in facts for rule in rules
                       if fact.event in rule.events and rule.covers(fact.task_id, fact.node_group, fact.team))

    def watch_idle(self) -> ClusterIdle:
        """The dashboard's look at the cluster (its health view): how long no node has planned,
        and -- when that reaches a ``cluster.idle`` rule's ``after_ms`` while the cluster is still
        down -- the alert, keyed by the gap's first minute like the one the first node back
        raises, so the same outage alerts once whoever sees it first. One statement, plus the
        alert's transaction the first time this process sees the fact."""
        now_ms, through = self._repo().cluster_clock()
        idle = ClusterIdle(now_ms, through)
        rules = [r for r in self.rules() if AlertEvent.CLUSTER_IDLE in r.events and r.covers(None, None, None)
                 and idle.idle_ms and idle.idle_ms >= r.after_ms]
        if not rules:
            return idle
        fact = self._detectors.idle_fact(idle)
        queued = 0
        for rule in rules:
            if (rule.name, fact.key) in self._idle_raised:
                continue
            alert = self._queue(fact, rule, now_ms)
            if alert is not None:  # handled (queued, folded, or raised before by anyone)
                self._idle_raised.add((rule.name, fact.key))
                queued += alert.queue_id is not None
        return ClusterIdle(now_ms, through, queued)

    # --- raising -----------------------------------------------------------------------------------

    def _raise(self, fact: Fact, rule: AlertRule, now_ms: int) -> int:
        raised = self._queue(fact, rule, now_ms)
        return int(raised is not None and raised.queue_id is not None)

    def _queue(self, fact: Fact, rule: AlertRule, now_ms: int) -> RaisedAlert | None:
        """The alert of a fact and rule (None: it could not be queued now; a later look retries)."""
        try:
            return self._repo().raise_alert(rule.name, fact.event, fact.key, throttle_scope(fact), rule.throttle_ms,
                                            lambda folded: self._message(rule, fact, folded, now_ms), fact.team)
        except ReachError:
            logger.warning("alert %s for %s could not be queued", rule.name, fact.key, exc_info=True)
            return None

    def _message(self, rule: AlertRule, fact: Fact, folded: int, now_ms: int) -> AlertMessage:
        template = self._reach.find_template(rule.template)
        values = {name: "" for name in ALERT_VARIABLES}
        values.update(fact.values, event=str(fact.event), rule=rule.name, folded=str(folded))
        subject = render(template.subject, values, f"template {template.name} subject") if template.subject else None
        body = render(template.body, values, f"template {template.name} body")
        dnd = self._reach.dnd()
        held = not rule.bypass_dnd and in_window(dnd, now_ms)
        policy = self._reach.queue_policy()
        return AlertMessage(provider=rule.provider or template.provider, recipient=rule.to,
                            subject=" ".join(subject.split()) if subject else None, body=body,
                            urgent=rule.bypass_dnd, not_before=window_end_ms(dnd, now_ms) if held else None,
                            policy=(policy.max_attempts, policy.retry_delay_ms, policy.max_retry_delay_ms))

    def recent(self, limit: int = 50, scope: Scope = EVERY_TEAM) -> list[Any]:
        """The newest alerts (of ``scope``'s teams) with their delivery status (metadata only)."""
        return self._repo().recent(check_int(limit, "limit", 1, 200, ReachConfigError), scope)

    def counts(self, hours: int = 24, scope: Scope = EVERY_TEAM) -> dict[str, int]:
        """Alerts raised in the last ``hours`` by delivery status (DB clock), of ``scope``'s teams."""
        return self._repo().counts_within(check_int(hours, "hours", 1, 168, ReachConfigError) * 3_600_000, scope)

    def send_test(self, name: str, scope: Scope = EVERY_TEAM) -> str:
        """Queue a test alert of a rule (of ``scope``'s teams) now (not throttled, not
        deduplicated), as the rule's team's; its queue id. The stored rules are read again
        first: a rule another process moved to another team is not its former team's to test."""
        self._stored_at = 0.0
        rule = next((r for r in self.rules(scope) if r.name == name), None)
        if rule is None:
            raise ReachConfigError("rule", f"no alert rule {name!r}")
        key = f"test:{uuid.uuid4()}"
        fact = Fact(rule.events[0], key, key, None, None, {"summary": f"test alert of rule {name}",
                                                          "link": self._link("/notifications/alerts")})
        now = self._repo().probe().now_ms
        raised = self._repo().raise_alert(rule.name, "test", key, key, rule.throttle_ms,
                                          lambda folded: self._message(rule, fact, folded, now), rule.team)
        assert raised.queue_id is not None
        return raised.queue_id


def throttle_scope(fact: Fact) -> str:
    """What a rule's throttle counts per: the fact's scope (its task, or its event) within its team,
    so that one team's facts are never folded into another team's alert (nor counted in it)."""
    if fact.team is None:
        return fact.scope
    scoped = f"{fact.team}:{fact.scope}"
    return scoped if len(scoped) <= ID_LENGTH else f"{fact.team}:{hashlib.sha256(fact.scope.encode()).hexdigest()}"


def covered(rules: Iterable[AlertRule], tasks: Iterable[tuple[str, str]]) -> dict[str, int]:
    """How many of ``tasks`` ((id, team) pairs) each rule covers: its glob matches, in its team
    (the rules page warns about none)."""
    listed = list(tasks)
    return {rule.name: sum(1 for task_id, team in listed if (rule.team is None or team == rule.team)
                           and (rule.tasks is None or fnmatch.fnmatchcase(task_id, rule.tasks)))
            for rule in rules}
