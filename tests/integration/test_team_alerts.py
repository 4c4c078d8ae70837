"""Alerts per team, on every database (docs/teams.md, "Notifications and alerts").

A team's rule alerts about its own tasks only; a global rule about every task. Either way the
alert is queued as the team's whose task it is about (what a team member's Notifications and
Alerts pages show), and a fact about no one team (a node, the cluster) as no team's.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.access import Scope
from scheduler_core.db.tables import executions, reach_queue
from scheduler_core.errors import ConfigError, ReachConfigError
from scheduler_core.reach import Reach
from scheduler_core.store.alerts import AlertRepository
from scheduler_core.store.tasks import TaskRepository
from scheduler_core.store.teams import TeamRepository
from tests.helpers.http_server import RecordingServer
from tests.helpers.journal import db_now, execution_row, insert_rows
from tests.integration.test_alerts import (
    ATTACHED,
    MakeNode,
    _close_attached,
    alerts_sent,
    attach,
    facts,
    reach_config,
    receiver,
    wait_until,
)
from tests.webapp.api_support import queued_row

__all__ = ["_close_attached", "receiver"]  # fixtures: the receiver, and closing each Reach attached


def _queued(engine: Engine) -> list[tuple[str, str | None, str | None]]:
    """(rule, team, subject) of every alert queued, by rule and subject."""
    q = reach_queue.c
    with engine.connect() as conn:
        rows = conn.execute(select(q.alert_rule, q.team, q.subject).where(q.alert_rule.is_not(None))).all()
    return sorted((r[0], r[1], r[2]) for r in rows)


def test_a_teams_rule_alerts_about_its_tasks_and_a_global_rule_about_all(
        make_node: MakeNode, engine: Engine, receiver: RecordingServer) -> None:
    TeamRepository(engine).create("ops", "Operations")
    node = make_node(hooks={"on_task_execute": lambda event: 1 / 0})  # every run fails (final: not idempotent)
    config = reach_config(receiver)
    config["alerts"] = [{**config["alerts"][0], "name": "everyone", "events": ["execution.failed"]}]
    reach = attach(engine, node, config)
    reach.alerts.save_rule({"name": "ops-only", "events": ["execution.failed"], "template": "alert",
                            "to": "ops-pager", "throttle_ms": 1_000, "team": "ops"})
    node.register(TaskDefinition(id="ops-task", name="Ops task", cron="0 3 * * *", enabled=False, team="ops"))
    node.register(TaskDefinition(id="other-task", name="Other task", cron="0 3 * * *", enabled=False))
    node.start()
    assert node.trigger("ops-task").status == "failed"
    assert node.trigger("other-task").status == "failed"
    wait_until(lambda: len(facts(engine)) == 3, "three facts: the global rule's two, the team rule's one")
    wait_until(lambda: len(alerts_sent(receiver)) == 3, "the three alerts to be delivered")
    assert _queued(engine) == [("everyone", "default", "[execution.failed] other-task"),
                               ("everyone", "ops", "[execution.failed] ops-task"),
                               ("ops-only", "ops", "[execution.failed] ops-task")]
    assert sorted((a["to"], a["subject"]) for a in alerts_sent(receiver)) == [
        ("ops-channel", "[execution.failed] ops-task"), ("ops-channel", "[execution.failed] other-task"),
        ("ops-pager", "[execution.failed] ops-task")]
    ops = Scope(frozenset({"ops"}))
    assert sorted(a.alert_rule for a in reach.alerts.recent(scope=ops)) == ["everyone", "ops-only"]
    assert sum(reach.alerts.counts(scope=ops).values()) == 2
    assert [r.name for r in reach.alerts.rules(ops)] == ["ops-only"]  # a global rule is not the team's to see


def test_a_test_alert_is_its_rules_team_and_a_global_ones_no_teams(make_node: MakeNode, engine: Engine,
                                                                   receiver: RecordingServer) -> None:
    TeamRepository(engine).create("ops", "Operations")
    reach = attach(engine, make_node(), reach_config(receiver))
    reach.alerts.save_rule({"name": "ops-only", "events": ["task.paused"], "template": "alert", "to": "ops-pager",
                            "team": "ops"})
    ops = Scope(frozenset({"ops"}))
    team_test, global_test = reach.alerts.send_test("ops-only", ops), reach.alerts.send_test("ops")
    assert reach.queue.get(team_test, ops) is not None and reach.queue.get(global_test, ops) is None
    assert reach.queue.get(global_test) is not None  # a global caller sees it
    with pytest.raises(ReachConfigError, match="no alert rule 'ops'"):
        reach.alerts.send_test("ops", ops)  # a global rule is not a team's to test


def test_a_rule_moved_by_another_process_is_no_longer_its_former_teams_to_test(
        make_node: MakeNode, engine: Engine, receiver: RecordingServer) -> None:
    TeamRepository(engine).create("ops", "Operations")
    here, there = (attach(engine, make_node(), reach_config(receiver)) for _ in range(2))
    rule = {"name": "moving", "events": ["task.paused"], "template": "alert", "to": "pager", "team": "ops"}
    here.alerts.save_rule(rule)
    ops = Scope(frozenset({"ops"}))
    assert [r.name for r in here.alerts.rules(ops)] == ["moving"]  # read, and kept for a while here
    there.alerts.save_rule({**rule, "team": "default"}, there.alerts.stored_versions()["moving"])
    with pytest.raises(ReachConfigError, match="no alert rule 'moving'"):
        here.alerts.send_test("moving", ops)
    queued = here.queue.get(here.alerts.send_test("moving", Scope(frozenset({"default"}))))
    assert queued is not None and queued.team == "default"


def test_a_teams_rule_is_refused_what_no_team_owns_and_keeps_its_team(make_node: MakeNode, engine: Engine,
                                                                     receiver: RecordingServer) -> None:
    teams = TeamRepository(engine)
    teams.create("ops", "Operations")
    reach = attach(engine, make_node(), reach_config(receiver))
    rule = {"name": "ops-only", "events": ["execution.failed"], "template": "alert", "to": "ops-pager", "team": "ops"}
    for change, field in (({"events": ["execution.failed", "node.lost"]}, "alerts.ops-only.events"),
                          ({"events": ["cluster.idle"]}, "alerts.ops-only.events"),
                          ({"team": "nobody"}, "alerts.ops-only.team"),
                          ({"team": "Ops Team"}, "alerts.ops-only.team")):
        with pytest.raises(ReachConfigError) as refused:
            reach.alerts.save_rule({**rule, **change})
        assert refused.value.field == field, (change, refused.value)
    assert reach.alerts.rules() == [r for r in reach.alerts.rules() if r.name != "ops-only"]  # nothing stored
    reach.alerts.save_rule(rule)
    with pytest.raises(ConfigError, match="alert rules \\(ops-only\\)"):
        teams.delete("ops")  # the rule would be left in no team
    version = reach.alerts.stored_versions()["ops-only"]
    other = Scope(frozenset({"default"}))
    with pytest.raises(Exception, match="changed since it was read, or is gone"):
        reach.alerts.delete_rule("ops-only", version, other)  # another team's rule: as if gone
    reach.alerts.delete_rule("ops-only", version, Scope(frozenset({"ops"})))
    teams.delete("ops")


def test_a_global_rules_throttle_counts_each_teams_facts_apart(engine: Engine, receiver: RecordingServer) -> None:
    """Two dead letters of two teams within one throttle window: two alerts, each its team's (one
    team's fact is never folded into, nor counted in, another team's alert)."""
    TeamRepository(engine).create("ops", "Operations")
    config = reach_config(receiver)
    config["alerts"] = [{"name": "dead", "events": ["queue.dead"], "template": "alert", "to": "oncall",
                         "throttle_ms": 3_600_000}]
    reach = Reach(engine, config, node_id="scanner")
    reach.init()
    ATTACHED.append(reach)
    for team in ("ops", "default"):
        queued_row(engine, "dead", team=team)
    reach.alerts.due()
    assert reach.alerts.scan() == 2
    assert sorted(team for _, team, _ in _queued(engine)) == ["default", "ops"]


def test_a_run_left_by_a_deleted_task_is_not_named_after_the_task_that_reuses_its_id(engine: Engine) -> None:
    """Team ops's run of ``backup`` (the task deleted) and team default's new ``backup``: the run's
    alert carries no name of the other team's task."""
    TeamRepository(engine).create("ops", "Operations")
    TaskRepository(engine).insert(TaskDefinition(id="backup", name="Default's backup", cron="0 3 * * *"))
    run = {**execution_row("o-ops-backup", db_now(engine), "unknown", "backup"), "team": "ops"}
    insert_rows(engine, executions, [run])
    (event,) = AlertRepository(engine).journal_events((0, ""), 10)
    assert (event.team, event.task_name) == ("ops", None)
