"""No silent misses, catch-up, pause and a task's state, on every database (one process; the
multi-process version is tests/multinode/test_downtime.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, TaskDefinition
from scheduler_core.cron import cron_occurrence_id
from scheduler_core.db.tables import executions
from scheduler_core.errors import ConfigError, TaskNotFoundError
from scheduler_core.statuses import Trigger
from scheduler_core.store import ClaimRequest
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.journal import abandon_running_execution, enter_minute

MINUTE = 60_000
MakeNode = Callable[..., Scheduler]


def journal(engine: Engine, task_id: str) -> dict[int, Any]:
    """The task's journal rows by scheduled minute (manual ones under 0)."""
    with engine.connect() as conn:
        rows = conn.execute(select(executions).where(executions.c.task_id == task_id)).all()
    return {row.scheduled_minute or 0: row for row in rows}


def wait_until(condition: Callable[[], object], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def done(engine: Engine, task_id: str, minute: int) -> bool:
    row = journal(engine, task_id).get(minute)
    return row is not None and row.status not in ("running", "queued")


def hooks() -> dict[str, Any]:
    return {"on_task_execute": lambda event: {"minute": event.context.scheduled_minute}}


def run_then_stop(make_node: MakeNode, engine: Engine, task_ids: list[str]) -> int:
    """A node runs one minute of the tasks, then the whole cluster stops; returns that minute."""
    first = make_node(hooks=hooks())
    first.start()
    minute = enter_minute(engine, 2)
    wait_until(lambda: all(done(engine, t, minute) for t in task_ids), "the first minute to run")
    first.close()
    return minute


def test_a_gap_with_no_node_running_is_journaled_missed(make_node: MakeNode, engine: Engine) -> None:
    admin = make_node()
    admin.register(TaskDefinition(id="every", name="Every minute", cron="* * * * *"))
    first = run_then_stop(make_node, engine, ["every"])
    set_clock_offset(engine, clock_offset(engine) + 5 * MINUTE)  # the cluster is down for five minutes
    back = make_node(hooks=hooks())
    back.start()
    wait_until(lambda: done(engine, "every", first + 5 * MINUTE), "the first minute after the gap")
    rows = journal(engine, "every")
    assert rows[first].status == "success" and rows[first + 5 * MINUTE].status == "success"
    for m in range(1, 5):
        row = rows[first + m * MINUTE]
        assert (row.status, row.reason, row.trigger, row.owner_node) == ("missed", "no_node_running", "cron", None)
        assert row.occurrence_id == cron_occurrence_id("every", first + m * MINUTE)
    assert back.execution.overview().statuses["missed"].value == 4
    again = make_node(hooks=hooks())  # a late or second scan journals nothing twice
    again.start()
    time.sleep(0.5)
    assert len(journal(engine, "every")) == len(rows)


def test_catch_up_runs_the_latest_or_every_missed_minute_by_policy(make_node: MakeNode, engine: Engine) -> None:
    admin = make_node()
    admin.register(TaskDefinition(id="latest", name="Latest", cron="* * * * *",
                                  catchup={"policy": "latest", "window_ms": 10 * MINUTE}))
    admin.register(TaskDefinition(id="all", name="All", cron="* * * * *",
                                  catchup={"policy": "all", "window_ms": 150_000}))
    first = run_then_stop(make_node, engine, ["latest", "all"])
    set_clock_offset(engine, clock_offset(engine) + 4 * MINUTE)
    back = make_node(hooks=hooks())
    back.start()
    now = first + 4 * MINUTE
    wait_until(lambda: all(done(engine, t, first + m * MINUTE) for t in ("latest", "all") for m in range(1, 5)),
               "catch-up runs and the minute after the gap")
    latest, every = journal(engine, "latest"), journal(engine, "all")
    assert [latest[first + m * MINUTE].status for m in (1, 2)] == ["missed", "missed"]
    assert (latest[first + 3 * MINUTE].status, latest[first + 3 * MINUTE].trigger) == ("success", "catchup")
    # "all": the minutes inside its window (150 s before the first node came back) run, in order.
    assert (every[first + MINUTE].status, every[first + MINUTE].reason) == ("missed", "no_node_running")
    caught = [every[first + m * MINUTE] for m in (2, 3)]
    assert [(r.status, r.trigger) for r in caught] == [("success", "catchup")] * 2
    assert caught[0].attempts[0]["finished_at"] <= caught[1].attempts[0]["started_at"], "not one at a time, in order"
    assert every[now].status == "success" and every[now].trigger == "cron"
    assert {r.occurrence_id for r in caught} == {cron_occurrence_id("all", first + m * MINUTE) for m in (2, 3)}


def test_occurrences_no_live_node_can_run_are_missed_after_a_tick(make_node: MakeNode, engine: Engine) -> None:
    web = make_node()  # no hooks: it cannot run hook tasks
    web.register(TaskDefinition(id="hooked", name="Hooked", cron="* * * * *"))
    web.start()
    minute = enter_minute(engine, 2)
    wait_until(lambda: done(engine, "hooked", minute), "the occurrence to be journaled")
    row = journal(engine, "hooked")[minute]
    assert (row.status, row.reason, row.owner_node) == ("missed", "no_capable_node", None)
    app = make_node(hooks=hooks())  # a node able to run it: nothing is missed any more
    app.start()
    time.sleep(0.5)  # its first heartbeat
    minute = enter_minute(engine, 2)
    wait_until(lambda: done(engine, "hooked", minute), "the next occurrence to run")
    row = journal(engine, "hooked")[minute]
    assert (row.status, row.owner_node) == ("success", app.config.node_id)


def test_pause_stops_cron_occurrences_until_resumed_or_until(make_node: MakeNode, engine: Engine) -> None:
    node = make_node(hooks=hooks())
    node.register(TaskDefinition(id="job", name="Job", cron="* * * * *"))
    paused = node.pause("job", reason="deploy in progress", by="alice")
    assert paused.paused is not None and (paused.paused.by, paused.paused.reason, paused.paused.until) == (
        "alice", "deploy in progress", None)
    state = node.task_state("job")
    assert (state.state, state.paused) == ("paused", paused.paused)
    node.start()
    minute = enter_minute(engine, 2)
    time.sleep(1)
    assert minute not in journal(engine, "job"), "a paused task fired"
    assert node.trigger("job").status == "success"  # an operator's trigger still runs
    node.resume("job", by="alice")
    assert node.task_state("job").state == "ok"
    minute = enter_minute(engine, 2)
    wait_until(lambda: done(engine, "job", minute), "the resumed task to fire")
    node.pause("job", reason="maintenance window", until_ms=minute + 2 * MINUTE)
    set_clock_offset(engine, clock_offset(engine) + MINUTE)
    time.sleep(1)
    assert minute + MINUTE not in journal(engine, "job")
    minute = enter_minute(engine, 2)  # the pause is over: it runs again by itself
    wait_until(lambda: done(engine, "job", minute), "the task to resume at until_ms")
    assert node.task_state("job").state == "ok"


def test_task_state_says_what_blocks_a_task_and_what_it_cost(make_node: MakeNode, engine: Engine) -> None:
    node = make_node(hooks=hooks(), lease_ms=1_000)
    node.register(TaskDefinition(id="stuck", name="Stuck", cron="* * * * *"))
    holder = abandon_running_execution(engine, "stuck", started=True)  # its owner died mid-run
    node.start()
    wait_until(lambda: node.execution.get(holder).status == "unknown", "the dead owner's run to become unknown")
    for _ in range(2):
        minute = enter_minute(engine, 2)
        wait_until(lambda minute=minute: done(engine, "stuck", minute), "the occurrence to be skipped")
    state = node.task_state("stuck")
    skipped = [row for row in journal(engine, "stuck").values() if row.status == "skipped"]
    assert len(skipped) >= 2 and all(row.reason == "slot_busy" for row in skipped)
    assert (state.state, state.blocked_by, state.skipped_since, state.last_outcome) == (
        "blocked", holder, len(skipped), "skipped")
    execution = node.execution.get(holder)
    node.execution.resolve_unknown(holder, "discarded", execution.updated_at, "alice", "checked: did not run")
    assert node.task_state("stuck").state == "ok"


def test_pause_input_is_checked_by_name(make_node: MakeNode, engine: Engine) -> None:
    node = make_node()
    node.register(TaskDefinition(id="job", name="Job", cron="* * * * *"))
    cases = [({"until_ms": 1}, "until_ms"), ({"until_ms": -5}, "until_ms"), ({"reason": "x" * 3000}, "reason"),
             ({"by": 5}, "by"), ({"reason": "a\x00"}, "reason")]
    for kwargs, field in cases:
        with pytest.raises(ConfigError) as info:
            node.pause("job", **kwargs)
        assert info.value.field == field
    with pytest.raises(TaskNotFoundError):
        node.pause("nope")
    with pytest.raises(ConfigError):
        node.pause(5)  # type: ignore[arg-type]
    assert node.task_state("job").state == "ok"


def test_a_queued_catch_up_run_never_makes_the_due_minute_skipped(make_node: MakeNode, engine: Engine) -> None:
    """A node whose tick finds both a queued catch-up run of a task (another node's gap scan
    journaled it a moment ago) and that task's minute due claims the minute first: the minute
    runs on time, the catch-up run waits for the slot and follows. Claimed the other way round,
    the catch-up run took the slot and the due minute was ``skipped`` (``slot_busy``) -- seen
    with two nodes coming back at once in tests/multinode/test_downtime.py, under load."""
    admin = make_node()
    admin.register(TaskDefinition(id="latest", name="Latest", cron="* * * * *",
                                  catchup={"policy": "latest", "window_ms": 10 * MINUTE}))
    now = enter_minute(engine, 2)
    missed = now - 2 * MINUTE
    task = admin.task_ops.get("latest")
    admin.context().handoff.enqueue([ClaimRequest(
        occurrence_id=cron_occurrence_id("latest", missed), task_id="latest", task_revision=task.revision,
        trigger=Trigger.CATCHUP, max_attempts=task.max_attempts, token="", scheduled_minute=missed)])
    node = make_node(hooks=hooks())
    node.start()
    wait_until(lambda: done(engine, "latest", now) and done(engine, "latest", missed),
               "the due minute and the catch-up run")
    rows = journal(engine, "latest")
    assert (rows[now].status, rows[now].trigger) == ("success", "cron"), (rows[now].status, rows[now].reason)
    assert (rows[missed].status, rows[missed].trigger) == ("success", "catchup")
    assert rows[now].attempts[0]["finished_at"] <= rows[missed].attempts[0]["started_at"], "through one slot"
