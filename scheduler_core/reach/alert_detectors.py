"""Alert detectors: what the scan of ``reach.alerts`` reads, turned into facts.

A ``Fact`` is one thing that happened, once, under a stable key, with the template variables of
its alert. ``Detectors`` read through ``AlertRepository``: the changes after each detector's
cursor (the journal's unknown, failed and missed executions, dead notifications, a gap no node
planned, a database clock jump, a paused task), page by page, and the conditions that have lasted longer than
a rule's ``after_ms`` (blocked tasks, logs still pending, lost nodes). ``ClusterIdle`` is the
dashboard's look at how long the cluster has planned nothing. Raising the facts, once per rule,
is ``Alerts``' (reach/alerts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from scheduler_core.cron import MINUTE_MS
from scheduler_core.reach.alert_rules import AlertEvent, AlertRule
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.alerts import AlertRepository, JournalEvent, Probe

PAGE = 200  # facts read per statement
PAGES = 20  # statements one scan reads per detector at most (the rest: the next scan)
OVERLAP_MS = 60_000  # read again what changed this long before the cursor: a late commit is not skipped
FIRST_LOOK_MS = 3_600_000  # the first scan ever looks back this far, not over all history
JOURNAL_EVENT = {ExecutionStatus.UNKNOWN: AlertEvent.EXECUTION_UNKNOWN,
                 ExecutionStatus.FAILED: AlertEvent.EXECUTION_FAILED,
                 ExecutionStatus.MISSED: AlertEvent.EXECUTION_MISSED}


@dataclass(frozen=True)
class Fact:
    """One thing that happened, once: what every rule covering it alerts about."""

    event: AlertEvent
    key: str  # stable: the same fact seen again has the same key
    scope: str  # what a throttle counts per: the task, or the event for facts without one
    task_id: str | None
    node_group: str | None
    values: dict[str, str] = field(default_factory=dict)  # template variables (ALERT_VARIABLES)
    team: str | None = None  # the team of the task (or message) it is about; None: about no one team


@dataclass(frozen=True)
class ClusterIdle:
    """How long the cluster has planned nothing, by the database clock."""

    now_ms: int
    ticked_through: int  # the last minute some node planned; 0: no node has planned yet
    raised: int = 0  # alerts this look queued

    @property
    def gap_from(self) -> int:
        """The first minute no node planned (the key the first node back uses too)."""
        return self.ticked_through + MINUTE_MS

    @property
    def idle_ms(self) -> int:
        """Whole minutes before the current one that no node planned (0: none, or no node yet)."""
        if not self.ticked_through:
            return 0
        return max(0, self.now_ms - self.now_ms % MINUTE_MS - self.gap_from)


class Detectors:
    """The detectors of ``Alerts``: each reads through a fresh repository and links each fact to
    its page in the dashboard (``link``: the public URL before a path, when one is set)."""

    def __init__(self, repo: Callable[[], AlertRepository], link: Callable[[str], str]) -> None:
        self._repo = repo
        self._link = link

    def changes(self, probe: Probe, rules: list[AlertRule]) -> list[Fact]:
        """The facts of what changed since each detector's cursor (the cursors move)."""
        return [*self._journal_facts(probe), *self._dead_facts(probe), *self._gap_facts(probe, rules),
                *self._clock_facts(probe), *self._paused_facts(probe)]

    def _journal_facts(self, probe: Probe) -> Iterator[Fact]:
        repo = self._repo()
        for event in self._pages("journal", probe, repo.journal_events, lambda e: (e.updated_at, e.occurrence_id)):
            kind = JOURNAL_EVENT[ExecutionStatus(event.status)]
            yield self._execution_fact(kind, event, f"{kind}:{event.occurrence_id}")

    def _dead_facts(self, probe: Probe) -> Iterator[Fact]:
        repo = self._repo()
        for row in self._pages("dead", probe, repo.dead_letters, lambda r: (int(r.updated_at), r.queue_id)):
            if row.alert_rule is not None:
                continue  # an alert that could not be delivered: alerting about it would loop
            yield Fact(AlertEvent.QUEUE_DEAD, f"queue.dead:{row.queue_id}:{row.updated_at}", "queue.dead", None, None,
                       {"occurrence_id": row.queue_id, "status": "dead", "reason": row.last_failure or "",
                        "summary": f"notification {row.queue_id} ({row.provider}) is dead: {row.last_failure}",
                        "link": self._link("/notifications/dead")}, row.team)

    def _clock_facts(self, probe: Probe) -> Iterator[Fact]:
        if probe.clock_jump_latest is None:
            return
        for n in self._pages("clock", probe, self._repo().clock_jumps, lambda r: (int(r.clock_jump_at), r.node_id)):
            at, jump = int(n.clock_jump_at), int(n.clock_jump_ms)
            minute = at - at % MINUTE_MS
            yield Fact(AlertEvent.DATABASE_CLOCK_JUMP, f"database.clock_jump:{minute}", "database", None, None,
                       {"node_id": n.node_id, "at": _iso(at), "link": self._link("/nodes/"),
                        "reason": f"{jump:+d} ms",
                        "summary": f"the database clock jumped {jump:+d} ms against node {n.node_id}'s clock at "
                                   f"{_iso(at)} (a failover to a server with another clock?); leases were renewed "
                                   "at once"})

    def _paused_facts(self, probe: Probe) -> Iterator[Fact]:
        for t in self._pages("paused", probe, self._repo().paused_tasks, lambda r: (int(r.paused_at), r.id)):
            at, by = int(t.paused_at), t.paused_by or "someone"
            until = f" until {_iso(int(t.paused_until))}" if t.paused_until is not None else ""
            yield Fact(AlertEvent.TASK_PAUSED, f"task.paused:{t.id}:{at}", t.id, t.id, t.node_group,
                       {"task_id": t.id, "task_name": t.name or t.id, "status": "paused",
                        "reason": t.paused_reason or "", "at": _iso(at),
                        "link": self._link(f"/tasks/view/{quote(t.id, safe='')}"),
                        "summary": f"{t.name or t.id}: paused by {by}{until}"
                                   f"{': ' + t.paused_reason if t.paused_reason else ''}"}, t.team)

    def _pages(self, name: str, probe: Probe, read: Any, position: Any) -> Iterator[Any]:
        """Everything changed after the detector's cursor (less an overlap), page by page; the
        cursor moves to the last change read."""
        repo = self._repo()
        cursor = repo.cursor(name) or probe.now_ms - FIRST_LOOK_MS
        after: tuple[int, str] = (max(0, cursor - OVERLAP_MS), "")
        for _ in range(PAGES):
            rows = read(after, PAGE)
            yield from rows
            if rows:
                after = position(rows[-1])
            if len(rows) < PAGE:
                break
        repo.advance_cursor(name, after[0])

    def _gap_facts(self, probe: Probe, rules: list[AlertRule]) -> Iterator[Fact]:
        gap = probe.last_gap_to - probe.last_gap_from + 60_000 if probe.last_gap_from else 0
        if gap and any(gap >= r.after_ms for r in rules if AlertEvent.CLUSTER_IDLE in r.events):
            yield Fact(AlertEvent.CLUSTER_IDLE, f"cluster.idle:{probe.last_gap_from}", "cluster", None, None,
                       {"summary": f"no node ran for {gap // 60_000} minute(s) from {_iso(probe.last_gap_from)}",
                        "at": _iso(probe.last_gap_from), "link": self._link("/")})

    def idle_fact(self, idle: ClusterIdle) -> Fact:
        """The ``cluster.idle`` fact of a look while the cluster is still down, keyed by the gap's
        first minute like the one the first node back raises."""
        return Fact(AlertEvent.CLUSTER_IDLE, f"cluster.idle:{idle.gap_from}", "cluster", None, None,
                    {"summary": f"no node has run since {_iso(idle.ticked_through)}: "
                                f"{idle.idle_ms // MINUTE_MS} minute(s) not planned so far",
                     "at": _iso(idle.gap_from), "link": self._link("/nodes/")})

    def lasting(self, probe: Probe, rules: list[AlertRule]) -> list[Fact]:
        """The facts of conditions that have lasted longer than the soonest ``after_ms`` of the
        rules of their event (none read for an event no rule names)."""
        repo, facts = self._repo(), []
        for event, lister in ((AlertEvent.TASK_BLOCKED, self._blocked), (AlertEvent.LOG_PENDING, self._pending),
                              (AlertEvent.NODE_LOST, self._lost)):
            after = min((r.after_ms for r in rules if event in r.events), default=None)
            if after is not None:
                facts += lister(repo, probe.now_ms - after)
        return facts

    def _blocked(self, repo: AlertRepository, older_than: int) -> list[Fact]:
        held = [*repo.lingering(ExecutionStatus.UNKNOWN, older_than, PAGE),
                *repo.lingering(ExecutionStatus.RUNNING, older_than, PAGE)]
        return [self._execution_fact(AlertEvent.TASK_BLOCKED, e, f"task.blocked:{e.occurrence_id}") for e in held]

    def _pending(self, repo: AlertRepository, older_than: int) -> list[Fact]:
        return [self._execution_fact(AlertEvent.LOG_PENDING, e, f"log.pending:{e.occurrence_id}")
                for e in repo.pending_logs(older_than, PAGE)]

    def _lost(self, repo: AlertRepository, older_than: int) -> list[Fact]:
        return [Fact(AlertEvent.NODE_LOST, f"node.lost:{n.node_id}:{n.started_at}", n.node_id, None, None,
                     {"node_id": n.node_id, "at": _iso(int(n.last_seen_at)), "link": self._link("/nodes/"),
                      "summary": f"node {n.node_id} ({n.host}, pid {n.pid}) stopped heartbeating at "
                                 f"{_iso(int(n.last_seen_at))}"})
                for n in repo.lost_nodes(older_than)]

    def _execution_fact(self, event: AlertEvent, e: JournalEvent, key: str) -> Fact:
        page = ("/executions/unknown" if e.status == ExecutionStatus.UNKNOWN
                else f"/executions/?task={quote(e.task_id, safe='')}")
        values = {"task_id": e.task_id, "task_name": e.task_name or e.task_id, "occurrence_id": e.occurrence_id,
                  "status": e.status, "reason": e.reason or "", "error": (e.error or "")[:500],
                  "node_id": e.owner_node or "", "scheduled": _iso(e.scheduled_minute), "at": _iso(e.updated_at),
                  "link": self._link(page),
                  "summary": f"{e.task_name or e.task_id}: {event} ({e.status}{', ' + e.reason if e.reason else ''})"}
        return Fact(event, key, e.task_id, e.task_id, e.node_group, values, e.team)


def _iso(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
