"""SIGKILL of a node at each point of an execution, judged by the oracle.

A node process (tests/helpers/fault_node.py) runs a task due every minute and kills itself at
one point of that task's execution; then a live node in this process recovers, and the DB
clock moves on to the next two minutes, which must run normally. For every point, idempotent
or not, the oracle must find nothing wrong, and the first occurrence must end as the rules say:

=====================  ======================================  ======================================
killed                 not idempotent                          idempotent (budget 3)
=====================  ======================================  ======================================
before claim commit    nothing journaled: the survivor claims  the same
                       and runs it (sequence 1)
after claim commit     interrupted (owner_lost_before_start),  taken over once (sequence 2), runs
before begin commit    slot freed                              attempt 1
after begin commit,    unknown (lease_expired), slot kept      taken over once: attempts
before the handler     (the journal cannot tell that the       [unknown, success]
                       handler was never called)
in the handler         unknown (lease_expired), slot kept:     taken over once: attempts
before finish          the next minute is skipped (slot_busy)  [unknown, success]
                       until an operator resolves it
after finish, before   success; logs pending, projected by     the same
projection             repair_log -- or, when the projection
                       shares the finish's transaction (the
                       group commit), persisted: the kill then
                       comes right after that commit
=====================  ======================================  ======================================

The points are found by table and statement kind (fault_node.py), so they follow the engine
when it batches. A last case makes the group commit's projection fail (the log table is away),
so the finish commits alone and the node is killed before the separate projection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from scheduler_core.model import Execution
from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import (
    register,
    repair_pending,
    spawn_fault_node,
    survivor,
    wait_killed,
    wait_terminal,
)
from tests.helpers.fault_node import POINTS
from tests.helpers.journal import enter_minute
from tests.helpers.oracle import TaskSpec, Window, check_database, read_effects, read_events

pytestmark = pytest.mark.slow
LEASE_MS = 1500  # the doomed node's: recovery waits for it to run out
# The survivor's own runs must not lose their lease while the host is busy (a parallel test run on
# 2 cores): once, under load, its second-minute run outlived a 1.5 s lease and ended `unknown`.
SURVIVOR_LEASE_MS = 6000
DOOMED = "doomed"


def _expect_first(point: str, idempotent: bool, first: Execution, kill_where: str) -> None:
    """The rules' outcome for the occurrence whose owner was killed at ``point``."""
    statuses = [(a.node_id, a.sequence, a.status) for a in first.attempts]
    if point == "before_claim_commit":
        assert (first.status, first.sequence, first.owner_node) == ("success", 1, "survivor")
        assert statuses == [("survivor", 1, "success")]
    elif point in ("after_claim_commit", "before_begin_commit") and not idempotent:
        assert (first.status, first.reason, first.attempts) == ("interrupted", "owner_lost_before_start", ())
    elif point in ("after_claim_commit", "before_begin_commit"):
        assert (first.status, first.sequence, statuses) == ("success", 2, [("survivor", 2, "success")])
    elif point in ("after_begin_commit", "in_handler", "before_finish") and not idempotent:
        assert (first.status, first.reason, statuses) == ("unknown", "lease_expired", [(DOOMED, 1, "unknown")])
    elif point in ("after_begin_commit", "in_handler", "before_finish"):
        assert (first.status, first.sequence) == ("success", 2)
        assert statuses == [(DOOMED, 1, "unknown"), ("survivor", 2, "success")]
    else:  # before_projection: the finish committed, the projection never ran
        assert (first.status, first.owner_node, statuses) == ("success", DOOMED, [(DOOMED, 1, "success")])
        batched = "same transaction" in kill_where
        assert first.log_persistence == ("persisted" if batched else "pending"), kill_where


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_point_of_an_execution(point: str, idempotent: bool, database: TestDatabase,
                                               engine: Engine, events: Path) -> None:
    task = TaskSpec("victim", "* * * * *", idempotent=idempotent)
    register(engine, [task])
    first_minute = enter_minute(engine, seconds_into=5)
    doomed = spawn_fault_node(database.url, DOOMED, events, {"lease_ms": LEASE_MS},
                              env={"HAI_FAULT_KILL_AT": point, "HAI_FAULT_TASK": task.id}, clock=engine)
    wait_killed(doomed)
    kills = [e for e in read_events(events) if e["kind"] == "kill"]
    assert [k["point"] for k in kills] == [point]

    node = survivor(engine, events, lease_ms=SURVIVOR_LEASE_MS)
    try:
        first = wait_terminal(engine, task.id, first_minute, "the killed occurrence to be recovered")
        _expect_first(point, idempotent, first, kills[0]["where"])
        second_minute = enter_minute(engine, seconds_into=1)
        second = wait_terminal(engine, task.id, second_minute)
        if first.status == "unknown":  # it keeps the slot until somebody who checked resolves it
            assert (second.status, second.reason) == ("skipped", "slot_busy")
            node.execution.resolve_unknown(first.occurrence_id, "success", first.updated_at, "operator", "checked")
        else:
            assert (second.status, second.owner_node) == ("success", "survivor")
        last_minute = enter_minute(engine, seconds_into=1)
        last = wait_terminal(engine, task.id, last_minute)
        assert last.status == "success", (last.status, last.reason, last.attempts, last.owner_node, last.sequence)

        window = Window(first_minute, last_minute)
        effects = read_effects(events)
        assert check_database(engine, window, [task], effects) == []
        repaired = repair_pending(node)
        if point == "before_projection" and first.log_persistence == "pending":
            assert first.occurrence_id in repaired
        assert check_database(engine, window, [task], effects, projected=True) == []
    finally:
        node.close()


def test_sigkill_between_a_finish_and_its_separate_projection(database: TestDatabase, engine: Engine,
                                                              events: Path) -> None:
    """The terminal commit normally carries the log projection in its own transaction; when
    that projection fails, the finish is committed alone and the logs are projected after it.
    A node killed in between leaves a success with logs ``pending``, which repair_log settles."""
    task = TaskSpec("victim", "* * * * *")
    register(engine, [task])
    first_minute = enter_minute(engine, seconds_into=5)
    with engine.begin() as conn:  # the projection fails while the log table is away
        conn.execute(text("ALTER TABLE logs RENAME TO logs_away"))
    try:
        doomed = spawn_fault_node(database.url, DOOMED, events, {"lease_ms": LEASE_MS},
                                  env={"HAI_FAULT_KILL_AT": "before_projection", "HAI_FAULT_TASK": task.id},
                                  clock=engine)
        wait_killed(doomed)
    finally:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE logs_away RENAME TO logs"))
    assert [e["where"] for e in read_events(events) if e["kind"] == "kill"] == [
        "before INSERT INTO logs, the finish committed"]

    node = survivor(engine, events, lease_ms=SURVIVOR_LEASE_MS)
    try:
        first = wait_terminal(engine, task.id, first_minute)
        assert (first.status, first.owner_node, first.log_persistence) == ("success", DOOMED, "pending")
        second_minute = enter_minute(engine, seconds_into=1)
        assert wait_terminal(engine, task.id, second_minute).status == "success"
        window, effects = Window(first_minute, second_minute), read_effects(events)
        assert check_database(engine, window, [task], effects) == []
        assert first.occurrence_id in repair_pending(node)
        assert check_database(engine, window, [task], effects, projected=True) == []
    finally:
        node.close()
