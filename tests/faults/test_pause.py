"""SIGSTOP an owner past its lease, then SIGCONT: it must publish nothing.

The owner (tests/helpers/fault_node.py) stops itself with SIGSTOP either while its handler
runs (``in_handler``) or once the handler returned with its outcome still in memory
(``after_handler``), at a moment when it holds no database connection (see fault_node.py).
While it is stopped, a live node in this process recovers the execution: an idempotent task is
taken over and run again, a non-idempotent one is isolated as ``unknown``. Then the stopped
node continues: its renewal or its finish must be refused by the database, and the journal and
the logs must be exactly as the survivor left them.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from tests.conftest import TestDatabase
from tests.helpers.fault_cluster import (
    occurrence,
    register,
    spawn_fault_node,
    stop_nodes,
    survivor,
    wait_for,
    wait_terminal,
)
from tests.helpers.journal import enter_minute
from tests.helpers.oracle import TaskSpec, Window, check_database, read_effects, read_events, read_journal

pytestmark = pytest.mark.slow
LEASE_MS = 1500
HANDLER_S = 1.0
PAUSED = "paused"


def _stopped(proc: subprocess.Popen[str]) -> bool:
    with open(f"/proc/{proc.pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _after_resume(events: Path) -> list[dict[str, Any]]:
    """The paused node's events after it resumed: everything after its ``pause`` event, which it
    writes just before it stops (no write can start in between, see fault_node.py). Not after its
    ``resumed`` event: another thread of the resumed process (the lease keeper, renewing) may
    write before the paused thread gets to log that it resumed."""
    mine = [e for e in read_events(events) if e.get("node") == PAUSED]
    kinds = [e["kind"] for e in mine]
    return mine[kinds.index("pause") + 1:] if "resumed" in kinds else []


def _writes(events: Path) -> list[dict[str, Any]]:
    """The paused node's journal writes after it resumed."""
    return [e for e in _after_resume(events) if e["kind"] == "write"]


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("where", ["in_handler", "after_handler"])
def test_a_paused_owner_publishes_nothing_after_it_resumes(where: str, idempotent: bool, database: TestDatabase,
                                                           engine: Engine, events: Path) -> None:
    task = TaskSpec("victim", "* * * * *", idempotent=idempotent)
    register(engine, [task])
    minute = enter_minute(engine, seconds_into=5)
    paused = spawn_fault_node(database.url, PAUSED, events,
                              {"lease_ms": LEASE_MS, "sleep_s": {task.id: HANDLER_S}, "trace": True},
                              env={"HAI_FAULT_KILL_AT": where, "HAI_FAULT_TASK": task.id,
                                   "HAI_FAULT_SIGNAL": "SIGSTOP"}, clock=engine)
    try:
        wait_for(lambda: any(e["kind"] == "pause" for e in read_events(events)) and _stopped(paused),
                 "the owner to stop itself", [paused])
        node = survivor(engine, events, lease_ms=LEASE_MS)
        try:
            expected = ("success", 2, "persisted") if idempotent else ("unknown", 1, "persisted")
            wait_for(lambda: (found := occurrence(engine, task.id, minute)) is not None
                     and (found.status, found.sequence, found.log_persistence) == expected,
                     f"the survivor to recover the stopped owner's execution as {expected}")
            before = read_journal(engine)
            paused.send_signal(signal.SIGCONT)
            wait_for(lambda: _writes(events), "the resumed owner to write again", [paused])
            stop_nodes([paused])
            after = read_journal(engine)
        finally:
            node.close()
    finally:
        stop_nodes([paused])

    assert (after.executions, after.slots, after.logs) == (before.executions, before.slots, before.logs)
    published = [e for e in _writes(events) if e["rowcount"] not in (0, None)]
    assert published == [], f"the resumed owner changed the journal: {published}"
    first = occurrence(engine, task.id, minute)
    assert first is not None
    assert (first.attempts[0].node_id, first.attempts[0].status) == (PAUSED, "unknown")
    problems = check_database(engine, Window(minute, minute), [task], read_effects(events))
    assert problems == []


@pytest.mark.parametrize("point", ["before_finish", "in_finish_before_projection"])
def test_an_owner_frozen_inside_its_terminal_commit_does_not_stall_the_other_nodes(
        point: str, server_database: TestDatabase, server_engine: Engine, events: Path) -> None:
    """A process frozen in the middle of a write (GC pause, VM freeze) holds its row locks.
    Its execution may wait for it, but the other nodes must go on scheduling everything else:
    a task due in the next minute still runs while the owner of another one is frozen. (The
    other task is registered after the freeze: one the frozen node ran shares its finish batch,
    and keeps its slot -- rightly -- until that owner's transaction ends.) Frozen either before
    its finish UPDATE (the journal row locked) or after it and the slot release (the slot row
    locked and changed, uncommitted): a claim must not wait on that slot row."""
    engine = server_engine
    victim = TaskSpec("victim", "* * * * *")
    register(engine, [victim])
    minute = enter_minute(engine, seconds_into=5)
    # Due in the next minute only: one the survivor started in this minute would still be
    # running when the test clock jumps ahead, and its lease would expire with the jump.
    other = TaskSpec("other", f"{(minute // 60_000 + 1) % 60} * * * *")
    frozen = spawn_fault_node(server_database.url, PAUSED, events, {"lease_ms": LEASE_MS},
                              env={"HAI_FAULT_KILL_AT": point, "HAI_FAULT_TASK": victim.id,
                                   "HAI_FAULT_SIGNAL": "SIGSTOP"}, clock=engine)
    node = None
    try:
        wait_for(lambda: any(e["kind"] == "pause" for e in read_events(events)) and _stopped(frozen),
                 "the owner to freeze inside its terminal commit", [frozen])
        register(engine, [other])
        node = survivor(engine, events, lease_ms=LEASE_MS)
        next_minute = enter_minute(engine, seconds_into=1)
        wait_for(lambda: (found := occurrence(engine, other.id, next_minute)) is not None
                 and found.status == "success", "the other task to run in the next minute", timeout=15)
        frozen.send_signal(signal.SIGCONT)  # its write goes on, is refused, and the locks are released
        for task, at in ((victim, minute), (victim, next_minute), (other, next_minute)):
            wait_terminal(engine, task.id, at)
        stop_nodes([frozen])
        effects = read_effects(events)
        assert check_database(engine, Window(minute, next_minute), [victim],
                              [e for e in effects if e.task_id == victim.id]) == []
        assert check_database(engine, Window(next_minute, next_minute), [other],
                              [e for e in effects if e.task_id == other.id]) == []
    finally:
        frozen.send_signal(signal.SIGCONT)
        if node is not None:
            node.close()
        stop_nodes([frozen])
