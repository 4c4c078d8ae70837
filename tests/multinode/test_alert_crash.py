"""A node killed in the middle of raising an alert: the fact still alerts exactly once.

The node (tests/helpers/alert_node.py) SIGKILLs itself either inside the transaction that
records the fact and queues its alert (nothing commits) or right after it committed (the
detector's cursor not yet moved). A second node then scans the same facts: one alert each,
delivered to a real webhook receiver.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db.tables import alert_facts, reach_queue
from scheduler_core.store import ExecutionRepository
from tests.conftest import TestDatabase
from tests.helpers.http_server import RecordingServer
from tests.helpers.journal import abandon_running_execution
from tests.helpers.processes import HELPERS

pytestmark = pytest.mark.slow
UNKNOWN = 3


@pytest.fixture
def receiver() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def _unknown_executions(engine: Engine) -> list[str]:
    """Executions whose owner died mid-run, isolated as unknown (as a node's expiry scan would)."""
    admin = Scheduler(engine, SchedulerConfig(node_id="admin"))
    admin.init()
    admin.register(TaskDefinition(id="victim", name="Victim", cron="0 3 * * *"))
    for i in range(UNKNOWN - 1):
        admin.register(TaskDefinition(id=f"victim-{i}", name=f"Victim {i}", cron="0 3 * * *"))
    admin.close()
    repo = ExecutionRepository(engine, "judge", 1000)
    ids = [abandon_running_execution(engine, task_id, started=True, lease_ms=1000)
           for task_id in ["victim", *(f"victim-{i}" for i in range(UNKNOWN - 1))]]
    time.sleep(1.2)  # their leases run out
    for occurrence in ids:
        execution = repo.get(occurrence)
        assert execution is not None
        assert repo.mark_unknown(execution, "lease_expired", list(execution.attempts))
    return ids


def _spawn(database: TestDatabase, node_id: str, config: dict[str, Any], kill_at: str | None) -> subprocess.Popen[str]:
    args = [sys.executable, str(HELPERS / "alert_node.py"), database.url, node_id, json.dumps(config)]
    return subprocess.Popen([*args, *([kill_at] if kill_at else [])], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("kill_at", ["in_raise", "after_raise"])
def test_a_node_killed_while_raising_an_alert_leaves_exactly_one(kill_at: str, database: TestDatabase,
                                                                  engine: Engine, receiver: RecordingServer) -> None:
    occurrences = _unknown_executions(engine)
    config = {"providers": [{"name": "ops-hook", "type": "api", "url": receiver.url("/echo")}],
              "templates": [{"name": "alert", "provider": "ops-hook", "body": "{event} {occurrence_id} {link}"}],
              "alerts": [{"name": "ops", "events": ["execution.unknown"], "template": "alert", "to": "ops"}]}
    victim = _spawn(database, "victim-node", config, kill_at)
    try:
        victim.wait(timeout=60)
    except subprocess.TimeoutExpired:
        victim.kill()
        raise AssertionError(f"the node did not kill itself: {victim.communicate()[1][-2000:]}") from None
    assert victim.returncode == -9, victim.communicate()[1][-2000:]
    survivor = _spawn(database, "survivor", config, None)
    try:
        deadline = time.monotonic() + 60
        while len([r for r in receiver.requests if r.path.startswith("/echo")]) < UNKNOWN:
            assert survivor.poll() is None, survivor.communicate()[1][-2000:]
            assert time.monotonic() < deadline, f"{len(receiver.requests)} alerts delivered"
            time.sleep(0.1)
        time.sleep(2)  # more scans and rounds: nothing more
    finally:
        survivor.terminate()
        survivor.communicate(timeout=60)
    bodies = [r.json()["body"] for r in receiver.requests if r.path.startswith("/echo")]
    assert sorted(b.split()[1] for b in bodies) == sorted(occurrences), bodies
    with engine.connect() as conn:
        assert len(conn.execute(select(alert_facts)).all()) == UNKNOWN
        assert [r.status for r in conn.execute(select(reach_queue))] == ["sent"] * UNKNOWN
