"""Alerts through the scheduler's own delivery queue, on every database, to a real webhook receiver.

The multi-process version (a node killed in the middle of raising an alert) is
tests/multinode/test_alert_crash.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.cron import MINUTE_MS
from scheduler_core.db.tables import alert_facts, reach_queue
from scheduler_core.errors import ReachConfigError
from scheduler_core.reach import Reach
from scheduler_core.store.alerts import AlertRepository
from scheduler_core.store.tasks import TaskRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer

MakeNode = Callable[..., Scheduler]
# The tasks these tests trigger are disabled (a trigger runs a disabled task): a test running at 03:00
# UTC met its task's own cron run in the slot, and its trigger was skipped.
PUBLIC = "https://scheduler.example"


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def reach_config(receiver: RecordingServer, **rule: Any) -> dict[str, Any]:
    return {
        "providers": [{"name": "ops-hook", "type": "api", "url": receiver.url("/echo")}],
        "templates": [{"name": "alert", "provider": "ops-hook", "subject": "[{event}] {task_id}",
                       "body": "{summary} occurrence={occurrence_id} link={link} folded={folded}"}],
        "alerts": [{"name": "ops", "events": ["execution.unknown", "execution.failed"], "template": "alert",
                    "to": "ops-channel", "throttle_ms": 1_000, **rule}],
    }


ATTACHED: list[Reach] = []


@pytest.fixture(autouse=True)
def _close_attached(engine: Engine) -> Iterator[None]:
    """Close every Reach a test attached (each holds its alert probe's connection), before the
    engine's teardown counts the connections left checked out."""
    yield
    while ATTACHED:
        ATTACHED.pop().close()


def attach(engine: Engine, node: Scheduler, config: dict[str, Any]) -> Reach:
    reach = Reach(engine, config, node_id=node.config.node_id, public_url=PUBLIC)
    reach.init()
    reach.attach(node)
    ATTACHED.append(reach)
    return reach


def wait_until(condition: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alerts_sent(receiver: RecordingServer) -> list[dict[str, Any]]:
    return [r.json() for r in receiver.requests if r.path.startswith("/echo")]


def facts(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(alert_facts).order_by(alert_facts.c.created_at)))


def test_an_unknown_execution_alerts_once_with_its_occurrence_and_link(make_node: MakeNode, engine: Engine,
                                                                        receiver: RecordingServer) -> None:
    node = make_node()
    reach = attach(engine, node, reach_config(receiver))
    with RecordingServer() as hanging:
        node.register(TaskDefinition(id="export", name="Nightly export", cron="0 3 * * *", enabled=False, handler={
            # sent, then no answer: unknown (2 s: in a loaded full run, 500 ms once ran out before the
            # connection was made -- rightly `failed`, the request not sent)
            "kind": "api", "url": hanging.url("/slow/30"), "timeout": 2000}))
        node.start()
        log = node.trigger("export")
    assert log.status == "unknown"
    wait_until(lambda: alerts_sent(receiver), "the alert to reach the webhook")
    time.sleep(1.5)  # more ticks, more probes: still one alert
    (alert,) = alerts_sent(receiver)
    assert alert["to"] == "ops-channel" and alert["subject"] == "[execution.unknown] export"
    assert f"occurrence={log.occurrence_id}" in alert["body"] and f"link={PUBLIC}/executions/unknown" in alert["body"]
    assert "Nightly export" in alert["body"]
    (fact,) = facts(engine)
    assert (fact.rule, fact.event, fact.event_key, fact.folded) == (
        "ops", "execution.unknown", f"execution.unknown:{log.occurrence_id}", False)
    assert reach.queue.get(fact.queue_id).status == "sent"


def test_repeats_within_the_throttle_are_folded_into_the_next_alert(make_node: MakeNode, engine: Engine,
                                                                     receiver: RecordingServer) -> None:
    node = make_node(hooks={"on_task_execute": lambda event: 1 / 0})  # fails every time (not idempotent: final)
    attach(engine, node, reach_config(receiver, throttle_ms=3_600_000))
    node.register(TaskDefinition(id="flaky", name="Flaky", cron="0 3 * * *", enabled=False))
    node.start()
    for _ in range(3):
        assert node.trigger("flaky").status == "failed"
    wait_until(lambda: len(facts(engine)) == 3, "the three failures to be seen")
    time.sleep(1)
    assert len(alerts_sent(receiver)) == 1, "a repeat within the throttle was sent"
    assert [f.folded for f in facts(engine)].count(True) == 2
    set_clock_offset(engine, clock_offset(engine) + 3_600_000)  # the window is over
    assert node.trigger("flaky").status == "failed"
    wait_until(lambda: len(alerts_sent(receiver)) == 2, "the next alert after the window")
    assert "folded=2" in alerts_sent(receiver)[-1]["body"]


def test_do_not_disturb_holds_a_normal_rule_and_not_an_urgent_one(make_node: MakeNode, engine: Engine,
                                                                   receiver: RecordingServer) -> None:
    now = time.gmtime(time.time() + clock_offset(engine) / 1000)
    start, end = f"{now.tm_hour:02d}:00", f"{(now.tm_hour + 2) % 24:02d}:00"  # a window around now (UTC)
    config = reach_config(receiver)
    config["dnd"] = {"enabled": True, "strategy": "delay", "start": start, "end": end, "timezone": "UTC"}
    config["alerts"] = [{**config["alerts"][0], "name": "normal"},
                        {**config["alerts"][0], "name": "urgent", "bypass_dnd": True}]
    node = make_node(hooks={"on_task_execute": lambda event: 1 / 0})
    reach = attach(engine, node, config)
    node.register(TaskDefinition(id="billing", name="Billing", cron="0 3 * * *", enabled=False))
    node.start()
    assert node.trigger("billing").status == "failed"
    wait_until(lambda: alerts_sent(receiver), "the urgent alert")
    time.sleep(1)
    (urgent,) = alerts_sent(receiver)
    assert urgent["subject"] == "[execution.failed] billing"
    with engine.connect() as conn:
        held = conn.execute(select(reach_queue).where(reach_queue.c.alert_rule == "normal")).one()
    assert held.status == "pending" and not held.urgent
    assert reach.queue.held_until(reach.queue.get(held.queue_id), held.created_at) == held.next_attempt_at
    assert held.next_attempt_at > held.created_at + 60_000  # at the end of the window


def test_rules_refuse_bad_input_by_field(engine: Engine, receiver: RecordingServer) -> None:
    base = reach_config(receiver)["alerts"][0]
    cases = [({"events": ["execution.exploded"]}, "alerts.ops.events[0]"),
             ({"template": "nope"}, "alerts.ops.template"),
             ({"provider": "fax"}, "alerts.ops.provider"),
             ({"throttle_ms": 999}, "alerts.ops.throttle_ms"),
             ({"throttle_ms": 8 * 86_400_000}, "alerts.ops.throttle_ms"),
             ({"events": []}, "alerts.ops.events"),
             ({"every": 5}, "alerts[0].every")]
    for change, field in cases:
        config = {**reach_config(receiver), "alerts": [{**base, **change}]}
        with pytest.raises(ReachConfigError) as info:
            Reach(engine, config).init()
        assert info.value.field == field, (change, str(info.value))
    typo = reach_config(receiver)
    typo["templates"][0]["body"] = "{sumary}"
    with pytest.raises(ReachConfigError, match="sumary"):
        Reach(engine, typo).init()


def test_stored_rules_and_a_test_alert(make_node: MakeNode, engine: Engine, receiver: RecordingServer) -> None:
    node = make_node()
    config = reach_config(receiver)
    config["alerts"] = []
    reach = attach(engine, node, config)
    rule = reach.alerts.save_rule({"name": "db-rule", "events": ["execution.missed"], "template": "alert",
                                   "to": "oncall", "tasks": "billing-*"})
    assert [r.name for r in reach.alerts.rules()] == ["db-rule"] and rule.tasks == "billing-*"
    with pytest.raises(ReachConfigError):
        reach.alerts.save_rule({"name": "bad", "events": ["execution.missed"], "template": "missing", "to": "x"})
    queue_id = reach.alerts.send_test("db-rule")
    reach.run_round()
    (sent,) = alerts_sent(receiver)
    assert sent["to"] == "oncall" and "test alert of rule db-rule" in sent["body"]
    assert reach.queue.get(queue_id).status == "sent"
    version = reach.alerts.stored_versions()["db-rule"]
    reach.alerts.delete_rule("db-rule", version)
    assert reach.alerts.rules() == []


# --- cluster.idle: raised by the first node back, and by the dashboard's look while it is down ---------------

IDLE_RULE = {"name": "idle", "events": ["cluster.idle"], "after_ms": 120_000}


def _stop_the_cluster_minutes_ago(engine: Engine, minutes: int) -> int:
    """The watermark as if the last node planned ``minutes`` minutes ago; returns that minute."""
    now_ms, _ = AlertRepository(engine).cluster_clock()
    through = now_ms - now_ms % MINUTE_MS - minutes * MINUTE_MS
    TaskRepository(engine).advance_watermark(through)
    return through


def idle_facts(engine: Engine) -> list[Any]:
    return [f for f in facts(engine) if f.event == "cluster.idle"]


def test_the_first_node_back_alerts_the_gap_it_found_once(make_node: MakeNode, engine: Engine,
                                                           receiver: RecordingServer) -> None:
    node = make_node()
    attach(engine, node, reach_config(receiver, **IDLE_RULE))
    through = _stop_the_cluster_minutes_ago(engine, 5)
    node.start()
    wait_until(lambda: alerts_sent(receiver), "the cluster.idle alert from the node back")
    time.sleep(1)  # more ticks: still one
    (alert,) = alerts_sent(receiver)
    assert alert["subject"].startswith("[cluster.idle]") and "no node ran for 4 minute(s)" in alert["body"]
    (fact,) = idle_facts(engine)
    assert fact.event_key == f"cluster.idle:{through + MINUTE_MS}"


def test_a_down_cluster_alerts_from_the_dashboards_look_once_and_the_node_back_adds_nothing(
        make_node: MakeNode, engine: Engine, receiver: RecordingServer) -> None:
    config = reach_config(receiver, **IDLE_RULE)
    dashboard = Reach(engine, config, public_url=PUBLIC)  # a dashboard worker: no node runs here
    dashboard.init()
    fresh = dashboard.alerts.watch_idle()
    assert (fresh.ticked_through, fresh.idle_ms, fresh.raised) == (0, 0, 0), "no node ever ran: no gap to alert"
    _stop_the_cluster_minutes_ago(engine, 2)
    assert dashboard.alerts.watch_idle().idle_ms == MINUTE_MS and not idle_facts(engine), "below after_ms"
    set_clock_offset(engine, clock_offset(engine) + 2 * MINUTE_MS)  # the outage goes on
    look = dashboard.alerts.watch_idle()
    assert look.idle_ms >= 3 * MINUTE_MS and look.raised == 1
    assert dashboard.alerts.watch_idle().raised == 0, "a second look raised it again"
    other_worker = Reach(engine, config, public_url=PUBLIC)
    other_worker.init()
    assert other_worker.alerts.watch_idle().raised == 0, "another dashboard worker raised it again"
    (fact,) = idle_facts(engine)
    assert fact.event_key == f"cluster.idle:{look.gap_from}" and fact.queue_id
    dashboard.run_round()
    (alert,) = alerts_sent(receiver)
    assert f"link={PUBLIC}/nodes/" in alert["body"] and "not planned so far" in alert["body"]
    node = make_node()  # the first node back finds the same gap: the same fact, no second alert
    attach(engine, node, config)
    node.start()
    wait_until(lambda: AlertRepository(engine).probe().last_gap_from == look.gap_from, "the node to record the gap")
    time.sleep(1.5)
    assert len(idle_facts(engine)) == 1 and len(alerts_sent(receiver)) == 1
    dashboard.close()
    other_worker.close()
