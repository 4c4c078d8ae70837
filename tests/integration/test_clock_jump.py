"""The database clock jumps ahead (a failover to a standby whose clock is ahead), on every database.

The jump is made as a promoted standby would make it: every statement's clock reads later from
one moment on (the engine's test clock offset; tests/ha/ does it with a real standby under
libfaketime). The owner's lease, renewed a moment before, would now run out before its next
renewal: the nodes notice the jump against their own monotonic clocks, the owner renews at once
and finishes its run (one attempt, no takeover), each node journals the jump on its row, and one
``database.clock_jump`` alert goes out for the cluster.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions
from scheduler_core.store.nodes import NodeRepository
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.http_server import RecordingServer
from tests.integration.test_alerts import ATTACHED, alerts_sent, attach, wait_until

MakeNode = Callable[..., Scheduler]
# Renewed every 4 s; a jump is reported beyond 2 s. The jump leaves 3 s of the lease, less than the
# 4 s to the next renewal: only the renewal at the jump keeps it, with up to 3 s for the owner's
# tick and renewal to be answered (a full test run's load once took more than a 1.5 s margin).
LEASE_MS = 12_000
JUMP_MS = 9_000  # more than the lease left before the next renewal, less than a whole lease


@pytest.fixture(autouse=True)
def _close_attached(engine: Engine) -> Iterator[None]:
    """Close each Reach attached (it holds its alert probe's connection) before the engine's teardown."""
    yield
    while ATTACHED:
        ATTACHED.pop().close()


def _lease_until(engine: Engine, occurrence: str) -> int:
    with engine.connect() as conn:
        until = conn.execute(select(executions.c.lease_until).where(
            executions.c.occurrence_id == occurrence)).scalar_one()
        conn.rollback()
    return -1 if until is None else int(until)


def _lease_left(engine: Engine, occurrence: str) -> int:
    with engine.connect() as conn:
        row = conn.execute(select(executions.c.lease_until, db_now_ms()).where(
            executions.c.occurrence_id == occurrence)).one()
        conn.rollback()
    return -1 if row[0] is None else int(row[0]) - int(row[1])  # None: no lease any more (lost, settled)


def test_a_clock_jump_ahead_costs_no_lease_and_alerts_once(make_node: MakeNode, engine: Engine) -> None:
    release = threading.Event()

    def handler(event: Any) -> str:
        release.wait(30)
        return "done"

    owner = make_node(hooks={"on_task_execute": handler}, lease_ms=LEASE_MS, node_id="owner")
    other = make_node(lease_ms=LEASE_MS, node_id="other")  # runs no hook task: it could only take over
    with RecordingServer() as receiver:
        config = {"providers": [{"name": "ops-hook", "type": "api", "url": receiver.url("/echo")}],
                  "templates": [{"name": "alert", "provider": "ops-hook", "subject": "[{event}]",
                                 "body": "{summary} node={node_id} jump={reason}"}],
                  "alerts": [{"name": "clock", "events": ["database.clock_jump"], "template": "alert",
                              "to": "ops", "throttle_ms": 3_600_000}]}
        for node in (owner, other):
            attach(engine, node, config)
        owner.register(TaskDefinition(id="long", name="Long", cron="0 3 * * *", handler={"kind": "hook"}))
        owner.start()
        other.start()
        occurrence = owner.submit("long", source="test")
        wait_until(lambda: owner.execution.get(occurrence).status == "running", "the run to start")
        # A renewal moves the lease's end (the lease *left* after one is not always more than right
        # after the begin: polled 50 ms apart, it reads as "less", and the test waited in vain).
        first = _lease_until(engine, occurrence)
        wait_until(lambda: _lease_until(engine, occurrence) > first, "a renewal", timeout=30)
        set_clock_offset(engine, clock_offset(engine) + JUMP_MS)  # the new primary's clock is ahead
        time.sleep(LEASE_MS / 3000 + 1)  # past the next scheduled renewal
        assert _lease_left(engine, occurrence) > LEASE_MS - JUMP_MS, "the lease was not renewed at the jump"
        release.set()
        wait_until(lambda: owner.execution.get(occurrence).status == "success", "the run to finish")
        done = owner.execution.get(occurrence)
        assert (done.sequence, [(a.node_id, a.status) for a in done.attempts]) == (1, [("owner", "success")])
        seen = {n.node_id: n for n in NodeRepository(engine).list()}
        for name in ("owner", "other"):
            assert seen[name].clock_jump_ms is not None and abs(seen[name].clock_jump_ms - JUMP_MS) < 500, seen[name]
        wait_until(lambda: alerts_sent(receiver), "the clock jump alert")
        time.sleep(1)  # both nodes' facts are in: still one alert
        (alert,) = alerts_sent(receiver)
        jumped = re.search(r"jump=\+([0-9]+) ms", alert["body"])
        assert alert["subject"] == "[database.clock_jump]" and jumped and abs(int(jumped[1]) - JUMP_MS) < 500, alert
