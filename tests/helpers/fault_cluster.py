"""Test-side plumbing shared by the fault suite (tests/faults): the DB clock offset, node
processes, an in-process survivor node that records its effects, and waiting.

The DB clock is never waited for: the test engine's clock offset (``scheduler_core.testing``;
``HAI_TEST_DB_CLOCK_OFFSET_MS`` gives it to node processes) puts DB time a few seconds into a
fresh minute, and an in-process survivor on that engine moves on to the next minute by raising
the offset.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import executions
from scheduler_core.model import Execution
from scheduler_core.store.executions import execution_from_row
from scheduler_core.task_policies import RetryPolicy
from scheduler_core.testing import OFFSET_ENV, clock_offset
from tests.helpers.node_cluster import register_tasks
from tests.helpers.oracle import Effect, TaskSpec, read_events, record_effect
from tests.helpers.processes import HELPERS

ROOT = HELPERS.parent.parent


def register(engine: Engine, specs: Iterable[TaskSpec], retry: int = 3) -> None:
    """Store the tasks (hook handlers); idempotent ones get a budget of ``retry`` attempts."""
    register_tasks(engine, (TaskDefinition(id=spec.id, name=spec.id, cron=spec.cron, timezone=spec.timezone,
                                           idempotent=spec.idempotent,
                                           retry=RetryPolicy(max_attempts=retry) if spec.idempotent else None)
                            for spec in specs))


# --- node processes --------------------------------------------------------------------------


def spawn_fault_node(url: str, node_id: str, events: Path, options: Mapping[str, Any] | None = None,
                     env: Mapping[str, str] | None = None, *, clock: Engine) -> subprocess.Popen[str]:
    """Start tests/helpers/fault_node.py with ``clock``'s DB clock offset (the test's engine)."""
    command = [sys.executable, str(HELPERS / "fault_node.py"), url, node_id, str(events), json.dumps(options or {})]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), OFFSET_ENV: str(clock_offset(clock)), **(env or {})}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)


def wait_for(predicate: Callable[[], Any], what: str, procs: Iterable[subprocess.Popen[str]] = (),
             timeout: float = 60, allow_exit: bool = False) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail if a node exits early."""
    deadline = time.monotonic() + timeout
    watched = list(procs)
    while True:
        found = predicate()
        if found:
            return found
        for proc in watched:
            if not allow_exit and proc.poll() is not None:
                raise AssertionError(f"a node exited ({proc.returncode}) while waiting for {what}: "
                                     f"{proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_ready(events: Path, node_id: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait for the node's ``ready`` event (it has started its tick loop)."""
    wait_for(lambda: any(e.get("kind") == "ready" and e.get("node") == node_id for e in read_events(events)),
             f"node {node_id} to be ready", [proc], timeout)


def wait_killed(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for a node that SIGKILLs itself; returns its stderr."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the node did not reach its kill point: {err[-3000:]}") from None
    assert proc.returncode == -signal.SIGKILL, f"node exited with {proc.returncode}: {err[-3000:]}"
    return err


def stop_nodes(procs: Iterable[subprocess.Popen[str]], timeout: float = 60) -> None:
    """SIGTERM every live node (continuing stopped ones) and require a clean exit."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    failures = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            failures.append(f"node did not stop on SIGTERM (its threads' stacks at the end): {err[-20000:]}")
            continue
        if proc.returncode not in (0, -signal.SIGKILL):
            failures.append(f"node exited with {proc.returncode}: {err[-3000:]}")
    assert not failures, "\n".join(failures)


# --- the survivor: a live node in this process ---------------------------------------------


def recording_hooks(events: Path, node_id: str, sleeps: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Hooks whose ``on_task_execute`` records its effect durably, like fault_node.py's."""

    def execute(hook_event: Any) -> Any:
        ctx = hook_event.context
        record_effect(events, Effect(ctx.task_id, ctx.occurrence_id, ctx.attempt, ctx.sequence, node_id, os.getpid()))
        pause = (sleeps or {}).get(ctx.task_id, 0)
        if pause:
            hook_event.signal.wait(pause)
        return {"node": node_id}

    return {"on_task_execute": execute}


def survivor(engine: Engine, events: Path, node_id: str = "survivor", lease_ms: int = 1500,
             start: bool = True) -> Scheduler:
    """A live node in this process (fast ticks) whose hook records its effects; close() it."""
    node = Scheduler(engine, SchedulerConfig(node_id=node_id, lease_ms=lease_ms, tick_interval_ms=100,
                                             max_concurrency=4), hooks=recording_hooks(events, node_id))
    node.init()
    if start:
        node.start()
    return node


def occurrence(engine: Engine, task_id: str, minute: int) -> Execution | None:
    """The journal row of a task's cron occurrence at ``minute`` (None: not journaled)."""
    query = select(executions).where(executions.c.occurrence_id == cron_occurrence_id(task_id, minute))
    with engine.connect() as conn:
        row = conn.execute(query).first()
        conn.rollback()
    return execution_from_row(row) if row is not None else None


def wait_terminal(engine: Engine, task_id: str, minute: int, what: str = "", timeout: float = 60,
                  procs: Iterable[subprocess.Popen[str]] = ()) -> Execution:
    """Wait until that occurrence is journaled and no longer running."""
    def settled() -> Execution | None:
        found = occurrence(engine, task_id, minute)
        return found if found is not None and found.status != "running" else None

    found: Execution = wait_for(settled, what or f"{task_id} at minute {minute} to settle", procs, timeout)
    return found


def repair_pending(node: Scheduler, rounds: int = 100) -> list[str]:
    """Drain the log failures with ``repair_log`` (offset 0, as the operator API says);
    returns the occurrences this call projected."""
    repaired: list[str] = []
    for _ in range(rounds):
        pending = node.execution.list_log_failures(limit=100, offset=0)
        if not pending:
            return repaired
        for execution in pending:
            if node.execution.repair_log(execution.occurrence_id).repaired:
                repaired.append(execution.occurrence_id)
    raise AssertionError(f"log failures still listed after {rounds} rounds of repair_log")
