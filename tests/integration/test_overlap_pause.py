"""A buffered occurrence of a paused task waits until the task is resumed (docs/semantics.md S9):
a pause starts no cron occurrence, not even one journaled before it to wait for the slot. On every
database, one in-process node, the DB clock stepped a minute on."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS
from scheduler_core.testing import set_clock_offset
from tests.helpers.node_cluster import db_now, journal
from tests.integration.test_alerts import MakeNode, wait_until


def test_a_buffered_occurrence_waits_while_its_task_is_paused(make_node: MakeNode, engine: Engine) -> None:
    now = db_now(engine)
    m0 = now - now % MINUTE_MS + 2 * MINUTE_MS
    set_clock_offset(engine, m0 - 1_000 - now)
    release = threading.Event()

    def slow(event: Any) -> None:
        if event.context.scheduled_minute == m0:
            release.wait(60)

    def statuses() -> dict[int, str]:
        return {r.scheduled_minute: r.status for r in journal(engine, task_id="slow")}

    node = make_node(hooks={"on_task_execute": slow}, lease_ms=600_000)
    node.register(TaskDefinition(id="slow", name="slow", cron="* * * * *", overlap={"policy": "buffer_one"},
                                 calendar={"active_from_ms": m0}))
    node.start()
    try:
        wait_until(lambda: statuses().get(m0) == "running", "M0 running")
        set_clock_offset(engine, m0 - 1_000 - now + MINUTE_MS)  # the clock a minute on: M1 is due
        wait_until(lambda: statuses().get(m0 + MINUTE_MS) == "queued", "M1 buffered")
        node.pause("slow", reason="maintenance")
        release.set()
        wait_until(lambda: statuses().get(m0) == "success", "M0 ended")
        time.sleep(1.5)  # several ticks and scans with the slot free
        assert statuses()[m0 + MINUTE_MS] == "queued", "a paused task's buffered occurrence must not start"
        node.resume("slow")
        wait_until(lambda: statuses().get(m0 + MINUTE_MS) == "success", "M1 run after the resume")
    finally:
        release.set()
