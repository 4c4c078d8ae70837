"""Alerts: what the detectors read (one probe statement per tick, then the new facts), and the one
transaction that turns a fact into an alert exactly once (docs/semantics.md, "Alerts").

A fact about a task carries the task's team (a run's: the team it ran in); its alert is queued as
that team's (``reach_queue.team``), and a rule's team (``alert_rules.team``, NULL: global) is what
a team member reads and edits (docs/teams.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, literal, or_, select, tuple_, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from scheduler_core.access import DEFAULT_TEAM, EVERY_TEAM, Scope
from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, optional_ms, to_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import (
    alert_facts,
    alert_rules,
    alert_throttles,
    executions,
    nodes,
    reach_queue,
    scheduler_meta,
    tasks,
)
from scheduler_core.statuses import ExecutionStatus, LogPersistenceStatus, QueueStatus
from scheduler_core.store.dialect import greatest, insert_ignore
from scheduler_core.store.reach_queue_pages import in_scope
from scheduler_core.store.tasks import TICKED_THROUGH
from scheduler_core.store.teams import check_team_exists
from scheduler_core.store.transactions import AutocommitLine, one_row, read, write

ALERT_NAMESPACE = uuid.UUID("6d1f3b7e-5f0a-4c57-9a63-1c2f0e8e4a11")
JOURNAL_STATUSES = (ExecutionStatus.UNKNOWN, ExecutionStatus.FAILED, ExecutionStatus.MISSED)


def alert_queue_id(rule: str, event_key: str) -> str:
    """The queue id of the alert a rule raises for a fact: the same on every node, every time."""
    return str(uuid.uuid5(ALERT_NAMESPACE, f"{rule}\0{event_key}"))


@dataclass(frozen=True)
class Probe:
    """What changed since the detectors last looked, in one statement."""

    now_ms: int
    journal_latest: int | None  # updated_at of the newest unknown / failed / missed execution
    dead_latest: int | None  # updated_at of the newest dead letter
    oldest_pending_log: int | None  # updated_at of the oldest execution whose logs are pending
    oldest_unknown: int | None  # updated_at of the oldest unknown execution
    oldest_running: int | None  # created_at of the oldest running execution
    oldest_heartbeat: int | None  # last_seen_at of the stalest node not stopped
    last_gap_from: int  # the latest gap in the cluster's ticks (the node that found it records it)
    last_gap_to: int
    clock_jump_latest: int | None = None  # clock_jump_at of the newest database clock jump a node saw
    paused_latest: int | None = None  # paused_at of the newest pause (index (paused_at, id))


@dataclass(frozen=True)
class JournalEvent:
    """An execution that may alert, with what a template shows of it."""

    occurrence_id: str
    task_id: str
    task_name: str | None
    node_group: str | None
    status: ExecutionStatus
    reason: str | None
    trigger: str
    scheduled_minute: int | None
    owner_node: str | None
    error: str | None  # the last attempt's error
    created_at: int
    updated_at: int
    team: str = DEFAULT_TEAM  # the team the run is in (its own, once its task moved or went; else its task's)


@dataclass(frozen=True)
class StoredRule:
    """A rule stored from the dashboard: its definition (without name and team), team, version."""

    name: str
    definition: dict[str, Any]
    team: str | None  # None: a global rule
    updated_at: int


@dataclass(frozen=True)
class AlertMessage:
    """The queue row an alert goes out as (rendered by the caller)."""

    provider: str
    recipient: str
    subject: str | None
    body: str
    urgent: bool
    not_before: int | None
    policy: tuple[int, int, int]  # max attempts, retry delay, max retry delay


@dataclass(frozen=True)
class RaisedAlert:
    queue_id: str | None  # None: folded into an earlier alert (throttled), or seen before
    new: bool  # False: this (rule, fact) was handled before (by this node or another)


META_CURSOR_PREFIX = "alerts_cursor_"
LAST_GAP_FROM, LAST_GAP_TO = "last_gap_from", "last_gap_to"


def _meta(name: str) -> Any:
    return select(scheduler_meta.c.value).where(scheduler_meta.c.name == name).scalar_subquery()


class AlertRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- detection reads ------------------------------------------------------------------

    def probe(self, line: AutocommitLine | None = None) -> Probe:
        """One statement: the DB clock and a value per detector (index probes; small tables). On a
        held autocommit ``line`` (the node's tick) it is one round trip."""
        x = executions.c
        query = select(
            db_now_ms(),
            select(func.max(x.updated_at)).where(x.status.in_(JOURNAL_STATUSES)).scalar_subquery(),
            select(func.max(reach_queue.c.updated_at)).where(reach_queue.c.status == QueueStatus.DEAD)
            .scalar_subquery(),
            select(func.min(x.updated_at)).where(x.log_persistence == LogPersistenceStatus.PENDING).scalar_subquery(),
            select(func.min(x.updated_at)).where(x.status == ExecutionStatus.UNKNOWN).scalar_subquery(),
            select(func.min(x.created_at)).where(x.status == ExecutionStatus.RUNNING).scalar_subquery(),
            select(func.min(nodes.c.last_seen_at)).where(nodes.c.stopped_at.is_(None)).scalar_subquery(),
            _meta(LAST_GAP_FROM), _meta(LAST_GAP_TO),
            select(func.max(nodes.c.clock_jump_at)).scalar_subquery(),  # a few rows: one per node
            select(func.max(tasks.c.paused_at)).scalar_subquery())
        row = line.one(query) if line is not None else read(self.engine, lambda conn: conn.execute(query).one())
        v = [optional_ms(value, "probe") for value in row]
        return Probe(now_ms=v[0] or 0, journal_latest=v[1], dead_latest=v[2], oldest_pending_log=v[3],
                     oldest_unknown=v[4], oldest_running=v[5], oldest_heartbeat=v[6], last_gap_from=v[7] or 0,
                     last_gap_to=v[8] or 0, clock_jump_latest=v[9], paused_latest=v[10])

    def cluster_clock(self) -> tuple[int, int]:
        """One statement: the DB clock and the cluster's watermark, the last minute some node
        planned (0: no node has planned yet)."""
        row = read(self.engine, lambda conn: conn.execute(select(db_now_ms(), _meta(TICKED_THROUGH))).one())
        return to_ms(row[0], "db_now_ms"), optional_ms(row[1], TICKED_THROUGH) or 0

    def journal_events(self, after: tuple[int, str], limit: int,
                       statuses: Sequence[str] = JOURNAL_STATUSES) -> list[JournalEvent]:
        """Executions in ``statuses`` changed after the keyset position ``(updated_at, id)``,
        oldest change first, with their task's name and group."""
        x = executions.c
        query = self._events().where(x.status.in_(list(statuses)), x.updated_at >= after[0],
                                     tuple_(x.updated_at, x.occurrence_id) > tuple_(literal(after[0]),
                                                                                    literal(after[1])))
        query = query.order_by(x.updated_at, x.occurrence_id).limit(limit)
        return read(self.engine, lambda conn: [_event(r) for r in conn.execute(query)])

    def lingering(self, status: str, older_than: int, limit: int) -> list[JournalEvent]:
        """Unknown executions unchanged since ``older_than``, or running ones created before it."""
        x = executions.c
        column = x.created_at if status == ExecutionStatus.RUNNING else x.updated_at
        query = self._events().where(x.status == status, column < older_than).order_by(column).limit(limit)
        return read(self.engine, lambda conn: [_event(r) for r in conn.execute(query)])

    def pending_logs(self, older_than: int, limit: int) -> list[JournalEvent]:
        x = executions.c
        query = (self._events().where(x.log_persistence == LogPersistenceStatus.PENDING, x.updated_at < older_than)
                 .order_by(x.updated_at).limit(limit))
        return read(self.engine, lambda conn: [_event(r) for r in conn.execute(query)])

    @staticmethod
    def _events() -> Any:
        run_team = func.coalesce(executions.c.team, tasks.c.team, literal(DEFAULT_TEAM)).label("run_team")
        x = executions.c  # the task of the run's team (not another team's task that reuses its id)
        same_task = and_(tasks.c.id == x.task_id, or_(x.team.is_(None), tasks.c.team == x.team))
        return (select(executions, tasks.c.name.label("task_name"), tasks.c.node_group, run_team)
                .select_from(executions.outerjoin(tasks, same_task)))

    def dead_letters(self, after: tuple[int, str], limit: int) -> list[Row[Any]]:
        q = reach_queue.c
        query = (select(q.queue_id, q.provider, q.template, q.last_failure, q.attempt_count, q.updated_at,
                        q.alert_rule, q.team)
                 .where(q.status == QueueStatus.DEAD, tuple_(q.updated_at, q.queue_id) > tuple_(literal(after[0]),
                                                                                               literal(after[1])),
                        q.updated_at >= after[0])
                 .order_by(q.updated_at, q.queue_id).limit(limit))
        return read(self.engine, lambda conn: list(conn.execute(query)))

    def clock_jumps(self, after: tuple[int, str], limit: int) -> list[Row[Any]]:
        """Nodes whose last database clock jump was seen after the keyset position ``(clock_jump_at,
        node_id)``, oldest first."""
        n = nodes.c
        query = select(nodes).where(n.clock_jump_at >= after[0], tuple_(n.clock_jump_at, n.node_id) > tuple_(
            literal(after[0]), literal(after[1]))).order_by(n.clock_jump_at, n.node_id).limit(limit)
        return read(self.engine, lambda conn: list(conn.execute(query)))

    def paused_tasks(self, after: tuple[int, str], limit: int) -> list[Row[Any]]:
        """Tasks paused (and not resumed since) after the keyset position ``(paused_at, id)``,
        oldest first (index ``(paused_at, id)``)."""
        t = tasks.c
        query = (select(t.id, t.name, t.node_group, t.team, t.paused_at, t.paused_until, t.paused_by, t.paused_reason)
                 .where(t.paused_at >= after[0], tuple_(t.paused_at, t.id) > tuple_(literal(after[0]),
                                                                                   literal(after[1])))
                 .order_by(t.paused_at, t.id).limit(limit))
        return read(self.engine, lambda conn: list(conn.execute(query)))

    def lost_nodes(self, older_than: int) -> list[Row[Any]]:
        query = select(nodes).where(nodes.c.stopped_at.is_(None), nodes.c.last_seen_at < older_than)
        return read(self.engine, lambda conn: list(conn.execute(query)))

    # --- cursors and the last gap -----------------------------------------------------------

    def cursor(self, name: str) -> int:
        value = read(self.engine, lambda conn: conn.execute(select(_meta(META_CURSOR_PREFIX + name))).scalar())
        return to_ms(value or 0, name)

    def advance_cursor(self, name: str, value_ms: int) -> None:
        """Move a detector's cursor forward to ``value_ms`` (never back)."""
        self._set_meta(META_CURSOR_PREFIX + name, value_ms, forward_only=True)

    def record_gap(self, first_ms: int, last_ms: int) -> None:
        """A node found minutes no node planned (cluster.idle)."""

        def work(conn: Connection) -> None:
            for name, value in ((LAST_GAP_FROM, first_ms), (LAST_GAP_TO, last_ms)):
                self._upsert_meta(conn, name, value, forward_only=False)

        write(self.engine, work)

    def _set_meta(self, name: str, value: int, forward_only: bool) -> None:
        write(self.engine, lambda conn: self._upsert_meta(conn, name, value, forward_only))

    @staticmethod
    def _upsert_meta(conn: Connection, name: str, value: int, forward_only: bool) -> None:
        conn.execute(insert_ignore(conn, scheduler_meta, [{"name": name, "value": 0}]))
        condition = [scheduler_meta.c.name == name]
        if forward_only:
            condition.append(scheduler_meta.c.value < value)
        conn.execute(update(scheduler_meta).where(*condition).values(value=value))

    # --- raising an alert: exactly once per (rule, fact) -----------------------------------------

    def raise_alert(self, rule: str, event: str, event_key: str, scope: str, throttle_ms: int,
                    message: Callable[[int], AlertMessage], team: str | None = None) -> RaisedAlert:
        """In one transaction: record the fact for the rule (a fact seen before changes nothing),
        then -- unless an alert of this rule and scope went out less than ``throttle_ms`` ago,
        which folds it into the count the next alert reports -- queue the alert, its id derived
        from (rule, fact), as ``team``'s (the fact's task's; None: about no one team).
        ``message(folded)`` renders it with the number of facts folded since the last alert of
        the scope."""
        queue_id = alert_queue_id(rule, event_key)

        def work(conn: Connection) -> RaisedAlert:
            if not self._record_fact(conn, {"rule": rule, "event_key": event_key, "event": event, "scope": scope,
                                            "queue_id": None, "folded": False, "created_at": db_statement_now_ms()}):
                return RaisedAlert(None, False)
            last_sent, folded = self._throttle(conn, rule, scope)
            now = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
            if last_sent is not None and now - last_sent < throttle_ms:
                self._fold(conn, rule, event_key, scope)
                return RaisedAlert(None, True)
            self._enqueue(conn, queue_id, rule, message(folded), team)
            conn.execute(update(alert_facts).where(alert_facts.c.rule == rule, alert_facts.c.event_key == event_key)
                         .values(queue_id=queue_id))
            conn.execute(update(alert_throttles).where(alert_throttles.c.rule == rule, alert_throttles.c.scope == scope)
                         .values(last_sent_at=db_now_ms(), folded=0))
            return RaisedAlert(queue_id, True)

        return write(self.engine, work)

    @staticmethod
    def _record_fact(conn: Connection, fact: dict[str, Any]) -> bool:
        """Insert the fact; False when it is there already (a concurrent insert of the same fact
        waits for the other transaction, then meets its key)."""
        try:
            with conn.begin_nested():
                conn.execute(alert_facts.insert().values(**fact))
        except IntegrityError:
            return False
        return True

    @staticmethod
    def _throttle(conn: Connection, rule: str, scope: str) -> tuple[int | None, int]:
        """The scope's throttle row, locked (made with no alert sent yet when absent)."""
        conn.execute(insert_ignore(conn, alert_throttles, [{"rule": rule, "scope": scope, "last_sent_at": 0,
                                                            "folded": 0}]))
        query = select(alert_throttles.c.last_sent_at, alert_throttles.c.folded).where(
            alert_throttles.c.rule == rule, alert_throttles.c.scope == scope)
        if dialect_kind(conn) != "sqlite":
            query = query.with_for_update()
        row = conn.execute(query).one()
        last = to_ms(row.last_sent_at, "last_sent_at")
        return (last or None), int(row.folded)

    @staticmethod
    def _fold(conn: Connection, rule: str, event_key: str, scope: str) -> None:
        conn.execute(update(alert_facts).where(alert_facts.c.rule == rule, alert_facts.c.event_key == event_key)
                     .values(folded=True))
        conn.execute(update(alert_throttles).where(alert_throttles.c.rule == rule, alert_throttles.c.scope == scope)
                     .values(folded=alert_throttles.c.folded + 1))

    @staticmethod
    def _enqueue(conn: Connection, queue_id: str, rule: str, message: AlertMessage, team: str | None) -> None:
        max_attempts, delay, max_delay = message.policy
        now = db_statement_now_ms()
        conn.execute(insert_ignore(conn, reach_queue, [{
            "queue_id": queue_id, "provider": message.provider, "template": None, "recipient": message.recipient,
            "subject": message.subject, "body": message.body, "extra": {}, "status": QueueStatus.PENDING,
            "attempt_count": 0, "max_attempts": max_attempts, "retry_delay_ms": delay, "max_retry_delay_ms": max_delay,
            "next_attempt_at": now if message.not_before is None else message.not_before, "locked_by": None,
            "lock_token": None, "locked_until": None, "last_failure": None, "message_id": None, "resolved_by": None,
            "created_at": now, "updated_at": now, "urgent": message.urgent, "alert_rule": rule, "team": team}]))

    # --- the alerts sent -------------------------------------------------------------------------

    def recent(self, limit: int, scope: Scope = EVERY_TEAM) -> list[Row[Any]]:
        """The newest alerts (of ``scope``'s teams): queue metadata (never the body or recipient),
        the rule and the team."""
        q = reach_queue.c
        query = (select(q.queue_id, q.alert_rule, q.provider, q.status, q.subject, q.last_failure, q.attempt_count,
                        q.next_attempt_at, q.urgent, q.created_at, q.updated_at, q.team)
                 .where(*_alerts_in(scope)).order_by(q.created_at.desc(), q.queue_id.desc()).limit(limit))
        return read(self.engine, lambda conn: list(conn.execute(query)))

    def counts_within(self, window_ms: int, scope: Scope = EVERY_TEAM) -> dict[str, int]:
        """Alerts raised in the last ``window_ms`` (DB clock) by delivery status, of ``scope``'s teams."""
        q = reach_queue.c
        query = (select(q.status, func.count())
                 .where(*_alerts_in(scope), q.created_at >= db_now_ms() - window_ms).group_by(q.status))
        return read(self.engine, lambda conn: {row[0]: int(row[1]) for row in conn.execute(query)})

    # --- stored rules ---------------------------------------------------------------------------

    def rules(self) -> list[StoredRule]:
        """Stored rules, by name."""
        query = select(alert_rules).order_by(alert_rules.c.name)
        return [StoredRule(r.name, dict(r.definition), r.team, to_ms(r.updated_at, "updated_at"))
                for r in read(self.engine, lambda conn: list(conn.execute(query)))]

    def save_rule(self, name: str, team: str | None, definition: dict[str, Any], expected_updated_at: int | None,
                  scope: Scope = EVERY_TEAM) -> bool:
        """Insert a rule (``expected_updated_at`` None) or replace it at that version, as ``team``'s
        (None: global); False when the name is taken, or the rule changed, is gone, or (an edit)
        is of a team outside ``scope``. A team must exist (held shared until the commit, so that
        it is not deleted under the rule): ``ConfigError`` naming ``team``."""

        def work(conn: Connection) -> bool:
            if team is not None:
                check_team_exists(conn, team)
            if expected_updated_at is None:
                now = db_statement_now_ms()
                try:
                    with conn.begin_nested():
                        conn.execute(alert_rules.insert().values(name=name, definition=definition, team=team,
                                                                 created_at=now, updated_at=now))
                except IntegrityError:
                    return False
                return True
            return one_row(conn.execute(update(alert_rules).where(
                alert_rules.c.name == name, alert_rules.c.updated_at == expected_updated_at, *_rules_in(scope),
            ).values(definition=definition, team=team,
                     updated_at=greatest(conn, db_now_ms(), alert_rules.c.updated_at + 1))))

        return write(self.engine, work)

    def delete_rule(self, name: str, expected_updated_at: int, scope: Scope = EVERY_TEAM) -> bool:
        return write(self.engine, lambda conn: one_row(conn.execute(delete(alert_rules).where(
            alert_rules.c.name == name, alert_rules.c.updated_at == expected_updated_at, *_rules_in(scope)))))


def _alerts_in(scope: Scope) -> list[Any]:
    condition = in_scope(scope)
    return [reach_queue.c.alert_rule.is_not(None), *([] if condition is None else [condition])]


def _rules_in(scope: Scope) -> list[Any]:
    """Stored rules of ``scope``'s teams (a global rule only for every team)."""
    return [] if scope.teams is None else [alert_rules.c.team.in_(sorted(scope.teams))]


def _event(row: Row[Any]) -> JournalEvent:
    d = row._mapping
    attempts = d["attempts"] or []
    error = attempts[-1].get("error") if attempts and isinstance(attempts[-1], dict) else None
    return JournalEvent(
        occurrence_id=d["occurrence_id"], task_id=d["task_id"], task_name=d["task_name"], node_group=d["node_group"],
        status=ExecutionStatus(d["status"]), reason=d["reason"], trigger=d["trigger"],
        scheduled_minute=optional_ms(d["scheduled_minute"], "scheduled_minute"), owner_node=d["owner_node"],
        error=error, created_at=to_ms(d["created_at"], "created_at"), updated_at=to_ms(d["updated_at"], "updated_at"),
        team=d["run_team"])
