"""Pause on failure on every database (docs/semantics.md R6a), in one process: manual runs neither
count nor pause; the Nth scheduled failure in a row pauses the task, audited, and the
``task.paused`` alert reaches a real webhook with the reason; a resume starts the count again.
The multi-process run is tests/multinode/test_pause_on_failure.py."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS, cron_occurrence_id
from scheduler_core.store.tasks import TaskRepository
from scheduler_core.store.users import AuditRepository
from scheduler_core.testing import set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.helpers.node_cluster import db_now, journal
from tests.integration.test_alerts import (  # noqa: F401  (_close_attached: closes each Reach attached)
    PUBLIC,
    MakeNode,
    _close_attached,
    alerts_sent,
    attach,
    reach_config,
    wait_until,
)


def _fail(event: Any) -> None:
    raise RuntimeError("the export's database is gone")


def test_n_scheduled_failures_in_a_row_pause_the_task_and_alert(make_node: MakeNode, engine: Engine) -> None:
    now = db_now(engine)
    m0 = now - now % MINUTE_MS + 2 * MINUTE_MS
    offset = m0 - 1_000 - now
    set_clock_offset(engine, offset)
    tasks = TaskRepository(engine)

    def step(minutes: int = 1) -> None:
        nonlocal offset
        offset += minutes * MINUTE_MS
        set_clock_offset(engine, offset)

    def ended(minute: int) -> bool:
        return any(r.scheduled_minute == minute and r.status == "failed" for r in journal(engine, task_id="flaky"))

    def paused() -> bool:
        task = tasks.get("flaky")
        return task is not None and task.paused is not None

    with RecordingServer() as receiver:
        node = make_node(hooks={"on_task_execute": _fail}, lease_ms=600_000)
        attach(engine, node, reach_config(receiver, events=["task.paused"]))
        node.register(TaskDefinition(id="flaky", name="Flaky export", cron="* * * * *", pause_on_failure=2,
                                     calendar={"active_from_ms": m0}))
        for _ in range(3):  # manual runs: failed, and they do not count
            assert node.trigger("flaky").status == "failed"
        node.start()
        wait_until(lambda: ended(m0), "M0 failed")
        time.sleep(0.5)
        assert not paused(), "one scheduled failure (and three manual ones) must not pause"
        step()
        wait_until(lambda: ended(m0 + MINUTE_MS), "M1 failed")
        wait_until(paused, "the pause after the second scheduled failure")
        reason = f"failed 2 times in a row (last: {cron_occurrence_id('flaky', m0 + MINUTE_MS)})"
        task = tasks.get("flaky")
        assert task is not None and task.paused is not None
        assert (task.paused.by, task.paused.reason, task.paused.until) == ("scheduler", reason, None)
        wait_until(lambda: alerts_sent(receiver), "the task.paused alert")
        (alert,) = alerts_sent(receiver)
        assert alert["subject"] == "[task.paused] flaky" and reason in alert["body"]
        assert f"{PUBLIC}/tasks/view/flaky" in alert["body"]
        (entry,) = [e for e in AuditRepository(engine).list(actor="scheduler") if e.target == "flaky"]
        assert (entry.action, entry.reason) == ("task.pause", reason)

        step()  # paused: M2 is not due
        time.sleep(1)
        assert {r.scheduled_minute for r in journal(engine, task_id="flaky", trigger="cron")} == {m0, m0 + MINUTE_MS}

        node.resume("flaky")  # a new revision: the count starts again
        step()
        wait_until(lambda: ended(m0 + 3 * MINUTE_MS), "M3 failed")
        time.sleep(0.5)
        assert not paused(), "after a resume, one failure must not pause"
        step()
        wait_until(lambda: ended(m0 + 4 * MINUTE_MS), "M4 failed")
        wait_until(paused, "the second pause")


def test_an_operators_pause_alerts_when_nothing_else_happens(make_node: MakeNode, engine: Engine) -> None:
    """The tick's probe notices a pause by itself: no execution ends, no letter dies, and the
    ``task.paused`` alert still goes out (the probe once looked only at the journal, the dead
    letters, gaps and clock jumps, so a pause alerted only when one of those changed too -- and a
    pause on failure, written just after its failed run's commit, was missed when the tick's scan
    fell in between)."""
    with RecordingServer() as receiver:
        node = make_node(lease_ms=600_000)
        reach = attach(engine, node, reach_config(receiver, events=["task.paused"]))
        node.register(TaskDefinition(id="report", name="Weekly report", cron="0 3 * * 1"))
        node.start()
        time.sleep(1)  # ticks probe and scan: everything before the pause is seen
        reach.alerts.scan()
        node.pause("report", reason="the warehouse is being moved", by="alice")
        wait_until(lambda: alerts_sent(receiver), "the task.paused alert")
        (alert,) = alerts_sent(receiver)
        assert alert["subject"] == "[task.paused] report"
        assert "paused by alice: the warehouse is being moved" in alert["body"]
