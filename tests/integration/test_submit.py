"""Scheduler.submit on every database: a manual trigger that does not wait for the run.

Real hook handlers that block on events, real slot contention through the journal, and a
real close() while the submitted run is inside its handler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.db.tables import executions
from scheduler_core.errors import ConfigError, NotInitializedError, TaskNotFoundError
from scheduler_core.store import ExecutionRepository
from tests.helpers.journal import slot_holder, wait_for_status

MakeScheduler = Callable[..., Scheduler]


class Gate:
    """A hook handler that reports when it entered and runs until released (or cancelled)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[str] = []
        self.cancelled: list[str | None] = []

    def __call__(self, event: Any) -> Any:
        self.calls.append(event.context.occurrence_id)
        self.entered.set()
        while not self.release.wait(0.05):
            if event.signal.is_set():
                self.cancelled.append(event.signal.reason)
                raise RuntimeError("cancelled")
        return {"ran": event.context.occurrence_id}


def _task(task_id: str = "report", **fields: Any) -> TaskDefinition:
    return TaskDefinition(id=task_id, name=task_id.title(), cron="0 2 * * *", **fields)


def _journal(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        rows = list(conn.execute(select(executions).order_by(executions.c.created_at)))
        conn.rollback()
    return rows


def test_submit_returns_while_the_run_goes_on(make_node: MakeScheduler, engine: Engine) -> None:
    gate = Gate()
    scheduler = make_node(hooks={"on_task_execute": gate})
    scheduler.register(_task())
    occurrence = scheduler.submit("report", source="dashboard:alice")
    # The claim is committed when submit returns: the row is there, running, holding the slot.
    running = scheduler.execution.get(occurrence)
    assert (running.status, running.trigger, running.source) == ("running", "manual", "dashboard:alice")
    assert slot_holder(engine, "report") == occurrence
    assert gate.entered.wait(10)  # the handler runs on another thread while we go on
    assert scheduler.execution.get(occurrence).status == "running"
    gate.release.set()
    done = wait_for_status(scheduler, occurrence, "success")
    assert done.attempts[-1].result == {"ran": occurrence} and gate.calls == [occurrence]
    assert slot_holder(engine, "report") is None
    [log] = scheduler.get_logs(task_id="report")
    assert (log.occurrence_id, log.status, log.source) == (occurrence, "success", "dashboard:alice")


def test_repeated_idempotency_key_returns_the_existing_occurrence(make_node: MakeScheduler, engine: Engine) -> None:
    gate = Gate()
    scheduler = make_node(hooks={"on_task_execute": gate})
    scheduler.register(_task())
    first = scheduler.submit("report", idempotency_key="2026-11-29")
    assert gate.entered.wait(10)
    assert scheduler.submit("report", idempotency_key="2026-11-29") == first  # while it runs
    gate.release.set()
    wait_for_status(scheduler, first, "success")
    assert scheduler.submit("report", source="again", idempotency_key="2026-11-29") == first  # after it ran
    assert scheduler.trigger("report", idempotency_key="2026-11-29").occurrence_id == first  # same id as trigger's
    assert gate.calls == [first] and [row.occurrence_id for row in _journal(engine)] == [first]
    other = scheduler.submit("report", idempotency_key="2026-11-30")
    assert other != first
    wait_for_status(scheduler, other, "success")


def test_busy_slot_is_journaled_skipped(make_node: MakeScheduler, engine: Engine) -> None:
    gate = Gate()
    scheduler = make_node(hooks={"on_task_execute": gate})
    scheduler.register(_task())
    first = scheduler.submit("report")
    assert gate.entered.wait(10)
    second = scheduler.submit("report", source="second")
    skipped = scheduler.execution.get(second)  # decided by the claim, before submit returned
    assert (skipped.status, skipped.reason, skipped.source) == ("skipped", "slot_busy", "second")
    gate.release.set()
    wait_for_status(scheduler, first, "success")
    assert gate.calls == [first] and slot_holder(engine, "report") is None


def test_slot_contention_between_two_nodes(make_node: MakeScheduler) -> None:
    gate = Gate()
    one, two = make_node(hooks={"on_task_execute": gate}), make_node(hooks={"on_task_execute": gate})
    one.register(_task())
    results: list[str] = []
    start = threading.Barrier(2)

    def submit(node: Scheduler) -> None:
        start.wait(10)
        results.append(node.submit("report"))

    threads = [threading.Thread(target=submit, args=(node,)) for node in (one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    statuses = sorted(one.execution.get(occurrence).status for occurrence in results)
    assert statuses == ["running", "skipped"]  # exactly one won the slot
    gate.release.set()
    winner = next(o for o in results if one.execution.get(o).status != "skipped")
    wait_for_status(one, winner, "success")
    assert gate.calls == [winner]


def test_close_while_running_leaves_an_unknown(make_node: MakeScheduler, engine: Engine) -> None:
    gate = Gate()
    scheduler = make_node(hooks={"on_task_execute": gate})
    scheduler.register(_task())  # not idempotent: a started handler's effect is unknown
    occurrence = scheduler.submit("report")
    assert gate.entered.wait(10)
    scheduler.close()  # cancels the handler and waits for the runner
    assert gate.cancelled == ["closing"]
    row = ExecutionRepository(engine, "reader", 60_000).get(occurrence)
    assert row is not None and (row.status, row.reason) == ("unknown", "node_closed")
    assert slot_holder(engine, "report") == occurrence  # unknown keeps the slot
    # The runner unregistered before close() returned; its thread ends right after.
    runs = [t for t in threading.enumerate() if t.name == f"hai-submit-{occurrence[:8]}"]
    for thread in runs:
        thread.join(10)
    assert not any(thread.is_alive() for thread in runs)


def test_close_hands_an_idempotent_run_to_another_node(make_node: MakeScheduler) -> None:
    gate = Gate()
    first = make_node(hooks={"on_task_execute": gate})
    first.register(_task(idempotent=True, retry={"max_attempts": 2}))
    occurrence = first.submit("report")
    assert gate.entered.wait(10)
    first.close()
    finisher = Gate()
    finisher.release.set()
    second = make_node(hooks={"on_task_execute": finisher})
    second.start()  # its expiry scan takes over the lease first expired at close
    done = wait_for_status(second, occurrence, "success")
    assert [a.status for a in done.attempts] == ["unknown", "success"] and done.sequence == 2
    assert finisher.calls == [occurrence]


def test_submit_bad_input_changes_nothing(make_node: MakeScheduler, engine: Engine) -> None:
    scheduler = make_node()
    scheduler.register(_task())
    with pytest.raises(TaskNotFoundError):
        scheduler.submit("missing")
    for field, kwargs in (("idempotency_key", {"idempotency_key": "k" * 129}), ("idempotency_key",
                          {"idempotency_key": " "}), ("source", {"source": "s" * 129}),
                          ("idempotency_key", {"idempotency_key": "a\x00b"}), ("source", {"source": "a\x00b"})):
        with pytest.raises(ConfigError) as info:
            scheduler.submit("report", **kwargs)
        assert info.value.field == field
    assert _journal(engine) == []
    closed = make_node(init=False)
    with pytest.raises(NotInitializedError):
        closed.submit("report")
