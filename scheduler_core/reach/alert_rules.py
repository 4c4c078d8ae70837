"""Alert rules: which events of which tasks go to whom, through which template, how often.

A rule with a ``team`` covers only that team's tasks, and only their events (TEAM_EVENTS); a rule
without one is global: every task, and the events about no one team (nodes, the cluster, the
database clock, dead notifications)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from scheduler_core.errors import ReachConfigError
from scheduler_core.reach.config import check_template_name
from scheduler_core.validation import (
    ID_MAX,
    check_bool,
    check_choice,
    check_group,
    check_int,
    check_optional_text,
    check_team,
    check_text,
)

WEEK_MS = 7 * 86_400_000
RULES_MAX = 200


class AlertEvent(StrEnum):
    """What can alert; each fact of an event has a stable key, so it alerts once per rule."""

    EXECUTION_UNKNOWN = "execution.unknown"  # key: the occurrence
    EXECUTION_FAILED = "execution.failed"  # final: no attempt left; key: the occurrence
    EXECUTION_MISSED = "execution.missed"  # key: the occurrence
    TASK_BLOCKED = "task.blocked"  # slot held by an unknown or long-running execution for after_ms
    TASK_PAUSED = "task.paused"  # paused (by failures in a row, or by an operator); key: the task and when
    LOG_PENDING = "log.pending"  # a log write pending for after_ms; key: the occurrence
    QUEUE_DEAD = "queue.dead"  # a message became dead; key: the message and when
    NODE_LOST = "node.lost"  # no heartbeat for after_ms without a clean stop; key: the node's run
    CLUSTER_IDLE = "cluster.idle"  # no node ticked for after_ms; key: when the gap began
    # The database clock jumped against a node's own clock beyond the tolerance (a failover to a server whose
    # clock differs, runtime/clock_watch.py); key: the minute it was seen, so every node seeing it alerts once.
    DATABASE_CLOCK_JUMP = "database.clock_jump"


# The events about a task: a team's rule may name only these (the others are about no one team).
TEAM_EVENTS = (AlertEvent.EXECUTION_UNKNOWN, AlertEvent.EXECUTION_FAILED, AlertEvent.EXECUTION_MISSED,
               AlertEvent.TASK_BLOCKED, AlertEvent.TASK_PAUSED, AlertEvent.LOG_PENDING)

# The variables a template of an alert may use ({name}); others are refused when the rule is made.
ALERT_VARIABLES = ("event", "rule", "task_id", "task_name", "occurrence_id", "status", "reason", "error", "node_id",
                   "link", "folded", "at", "scheduled", "summary")


@dataclass(frozen=True)
class AlertRule:
    """One rule, as configured (``"alerts": [...]``) or stored from the dashboard."""

    name: str
    events: tuple[AlertEvent, ...]
    template: str  # a template (configured or stored) over ALERT_VARIABLES
    to: str  # the recipient, in the provider's terms
    provider: str | None = None  # None: the template's provider
    tasks: str | None = None  # a glob over task ids (``billing-*``); None: every task
    node_group: str | None = None  # only tasks of this group
    throttle_ms: int = 600_000  # at most one alert per rule and task in this window; later ones folded: 1 s .. 7 d
    bypass_dnd: bool = False  # urgent: delivered during do-not-disturb too
    after_ms: int = 600_000  # task.blocked, log.pending, node.lost, cluster.idle: how long first; 1 min .. 7 d
    team: str | None = None  # only this team's tasks (and TEAM_EVENTS); None: a global rule

    def __post_init__(self) -> None:
        where = f"alerts.{self.name}" if isinstance(self.name, str) else "alerts"
        check_template_name(self.name, "alerts.name")
        if isinstance(self.events, str) or not isinstance(self.events, tuple | list) or not self.events:
            raise ReachConfigError(f"{where}.events", "must be a non-empty list of event names")
        object.__setattr__(self, "events", tuple(dict.fromkeys(
            check_choice(event, f"{where}.events[{index}]", AlertEvent, ReachConfigError)
            for index, event in enumerate(self.events))))
        check_template_name(self.template, f"{where}.template")
        check_text(self.to, f"{where}.to", 1_024, ReachConfigError, single_line=True)
        check_optional_text(self.provider, f"{where}.provider", ID_MAX, ReachConfigError, single_line=True)
        check_optional_text(self.tasks, f"{where}.tasks", ID_MAX, ReachConfigError, single_line=True)
        if self.node_group is not None:
            check_group(self.node_group, f"{where}.node_group", ReachConfigError)
        check_int(self.throttle_ms, f"{where}.throttle_ms", 1_000, WEEK_MS, ReachConfigError)
        check_bool(self.bypass_dnd, f"{where}.bypass_dnd", ReachConfigError)
        check_int(self.after_ms, f"{where}.after_ms", 60_000, WEEK_MS, ReachConfigError)
        if self.team is not None:
            check_team(self.team, f"{where}.team", ReachConfigError)
            other = [str(event) for event in self.events if event not in TEAM_EVENTS]
            if other:
                raise ReachConfigError(f"{where}.events", f"{', '.join(other)} is about no one team: only a "
                                                          "global rule (no team) alerts about it")

    @classmethod
    def parse(cls, values: Any, field: str = "alerts") -> AlertRule:
        if not isinstance(values, Mapping):
            raise ReachConfigError(field, "an alert rule must be a mapping")
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise ReachConfigError(f"{field}.{str(key)[:40]}",
                                       f"is not a rule setting (known: {', '.join(sorted(known))})")
        for required in ("name", "events", "template", "to"):
            if required not in values:
                raise ReachConfigError(f"{field}.{required}", "is required")
        return cls(**dict(values))

    def covers(self, task_id: str | None, node_group: str | None, team: str | None = None) -> bool:
        """Whether a fact of this task (None: no task, e.g. node.lost) in ``team`` is this rule's."""
        if self.team is not None and team != self.team:
            return False
        if task_id is None:
            return self.tasks is None and self.node_group is None
        if self.node_group is not None and node_group != self.node_group:
            return False
        return self.tasks is None or fnmatch.fnmatchcase(task_id, self.tasks)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["events"] = [str(event) for event in self.events]
        return data


def parse_rules(values: Any) -> tuple[AlertRule, ...]:
    """The configuration's ``alerts`` list; names are unique."""
    if values is None:
        return ()
    if isinstance(values, str) or not isinstance(values, list | tuple) or len(values) > RULES_MAX:
        raise ReachConfigError("alerts", f"must be a list of at most {RULES_MAX} rules")
    rules = tuple(AlertRule.parse(item, f"alerts[{index}]") for index, item in enumerate(values))
    names = [rule.name for rule in rules]
    for name in names:
        if names.count(name) > 1:
            raise ReachConfigError("alerts", f"rule {name!r} is given twice")
    return rules


