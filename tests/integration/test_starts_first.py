"""Starts before bookkeeping: while a node has due work to start, its terminal commits wait
(bounded), and a thread that handed its terminal commit over takes the next occurrence at once
(docs/architecture.md, "Group commit")."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition
from scheduler_core.db.tables import slots
from scheduler_core.runtime import batching
from scheduler_core.runtime.batching import DEFER_BATCH, GroupCommit
from scheduler_core.runtime.collector import BURST
from scheduler_core.testing import set_clock_offset
from tests.helpers.node_cluster import cron_at, journal, next_boundary

# --- the group commit's deferral ---------------------------------------------------------------


class Recorder:
    """A flush that records its batches and lets a test wait for them."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.flushed = threading.Condition()

    def __call__(self, batch: list[int]) -> list[int | Exception]:
        with self.flushed:
            self.batches.append(batch)
            self.flushed.notify_all()
        return [n * 10 for n in batch]

    def wait_for(self, rows: int, timeout: float = 10) -> bool:
        with self.flushed:
            return self.flushed.wait_for(lambda: sum(map(len, self.batches)) >= rows, timeout)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_queued_writes_wait_while_starts_are_pending_and_go_together_after(recorder: Recorder) -> None:
    busy = threading.Event()
    busy.set()
    group: GroupCommit[int, int] = GroupCommit("test", recorder)
    group.defer_while(busy.is_set)
    answers = [group.submit(n) for n in range(3)]
    assert not recorder.wait_for(1, timeout=0.3), "flushed while starts were pending"
    busy.clear()
    assert recorder.wait_for(3)
    assert recorder.batches == [[0, 1, 2]] and [a.result(10) for a in answers] == [0, 10, 20]
    group.drain()


def test_a_deferral_ends_once_a_full_batch_is_queued(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "DEFER_MAX_S", 60)
    group: GroupCommit[int, int] = GroupCommit("test", recorder)
    group.defer_while(lambda: True)  # starts never end
    for n in range(DEFER_BATCH):
        group.submit(n)
    assert recorder.wait_for(DEFER_BATCH, timeout=20), "a full batch waited for the longest wait"
    group.drain()


def test_a_deferral_ends_after_the_longest_wait(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "DEFER_MAX_S", 0.4)
    group: GroupCommit[int, int] = GroupCommit("test", recorder)
    group.defer_while(lambda: True)
    began = time.monotonic()
    lone = group.submit(-1)
    assert lone.result(20) == -10
    assert time.monotonic() - began >= 0.35, "a lone write did not wait"
    group.drain()


def test_a_drain_never_waits_for_a_deferral(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batching, "DEFER_MAX_S", 60)
    group: GroupCommit[int, int] = GroupCommit("test", recorder)
    group.defer_while(lambda: True)
    answer = group.submit(7)
    done = threading.Thread(target=group.drain)
    done.start()
    done.join(10)
    assert not done.is_alive() and answer.result(0) == 70


def test_an_undeferred_group_commit_writes_at_once(recorder: Recorder) -> None:
    group: GroupCommit[int, int] = GroupCommit("test", recorder)
    group.submit(1)
    assert recorder.wait_for(1, timeout=5)
    group.drain()


# --- the node: a freed thread does not wait for the terminal commit it handed over ----------


def test_a_freed_thread_takes_the_next_occurrence_while_a_terminal_commit_waits(server_engine: Engine) -> None:
    """One thread, no prefetch, two occurrences due in the same minute. The first run's terminal
    commit is held (its slot row locked from outside); the thread it freed runs the second one.
    Before: the claim counted the committing runner as if it held the thread, and was woken only
    when a runner settled -- the second run waited for the first one's commit (or a tick). (Row locks: a
    server; on SQLite the same node code runs, but any held write lock also stops the claim.)"""
    engine = server_engine
    offset, boundary = next_boundary(engine, lead_ms=2_500)
    set_clock_offset(engine, offset)
    blocker: list[Connection] = []
    ran: list[str] = []
    second = threading.Event()

    def execute(event: Any) -> None:
        task_id = event.context.task_id
        ran.append(task_id)
        if len(ran) == 1:  # hold this task's slot row: its terminal commit (slot release) waits
            time.sleep(1.0)  # a slow run: no prefetch at this pace (one thread x 0.5 s / 1 s)
            conn = engine.connect()
            conn.execute(select(slots.c.task_id).where(slots.c.task_id == task_id).with_for_update())
            blocker.append(conn)
        else:
            second.set()

    # A long tick interval: after the boundary's tick only a freed thread wakes the claim.
    node = Scheduler(engine, SchedulerConfig(node_id="one-thread", max_concurrency=1, max_queued=0,
                                             tick_interval_ms=20_000), hooks={"on_task_execute": execute})
    try:
        node.init()
        for i in range(2):
            node.register(TaskDefinition(id=f"pair-{i}", name=f"Pair {i}", cron=cron_at(boundary)))
        node.start()
        assert second.wait(10), f"the second occurrence did not start while the first one's commit waited: {ran}"
        first = journal(engine, task_id=ran[0], scheduled_minute=boundary)
        assert [row.status for row in first] == ["running"], "the first terminal commit was not held"
    finally:
        for conn in blocker:
            conn.rollback()
            conn.close()
    deadline = time.monotonic() + 20
    while {row.status for row in journal(engine, scheduled_minute=boundary)} != {"success"}:
        assert time.monotonic() < deadline, journal(engine, scheduled_minute=boundary)
        time.sleep(0.05)
    node.close()
    assert sorted(ran) == ["pair-0", "pair-1"]


# --- the node collects Python's garbage before a busy minute ----------------------------------


def test_the_node_collects_before_a_busy_minute_not_during_it(engine: Engine, make_node: Any) -> None:
    """runtime/collector.py: a full collection stops every thread for tens of milliseconds with a
    node's heap; the node runs it in the wait before a minute with many due occurrences."""
    offset, boundary = next_boundary(engine, lead_ms=2_500)
    set_clock_offset(engine, offset)
    node = make_node(hooks={"on_task_execute": lambda event: None})
    for i in range(BURST):
        node.register(TaskDefinition(id=f"busy-{i:03d}", name=f"Busy {i}", cron=cron_at(boundary)))
    node.start()
    deadline = time.monotonic() + 60
    while len([r for r in journal(engine, scheduled_minute=boundary) if r.status == "success"]) < BURST:
        assert time.monotonic() < deadline, "the busy minute did not run"
        time.sleep(0.1)
    assert node._node is not None
    collector = node._node._collector
    assert collector.collections == 1 and collector.last_at_ms is not None
    assert boundary - 1_500 < collector.last_at_ms < boundary


# --- begins written ahead of the threads ------------------------------------------------------


def test_begins_are_written_ahead_of_the_threads_not_one_thread_count_at_a_time(engine: Engine,
                                                                              make_node: Any) -> None:
    """runtime/run_pool.py: a fresh claim's first begin is written before it has a thread, for the
    idle threads and what the busy ones take within a short horizon at their pace, so a begin
    batch is not bounded by the thread count. Before: a runner held its thread through its begin's
    commit, so at 2 threads 60 occurrences took at least 30 begin statements (batches of 2)."""
    from sqlalchemy import event

    from tests.helpers.fault_node import statement_kind

    count, threads = 60, 2
    begins: list[int] = []

    def counted(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement_kind(statement) == "begin":
            begins.append(1)

    event.listen(engine, "before_cursor_execute", counted)
    offset, boundary = next_boundary(engine, lead_ms=2_500)
    set_clock_offset(engine, offset)
    node = make_node(hooks={"on_task_execute": lambda event: None}, max_concurrency=threads)
    for i in range(count):
        node.register(TaskDefinition(id=f"ahead-{i:03d}", name=f"Ahead {i}", cron=cron_at(boundary)))
    node.start()
    deadline = time.monotonic() + 60
    while len([r for r in journal(engine, scheduled_minute=boundary) if r.status == "success"]) < count:
        assert time.monotonic() < deadline, "the minute did not run"
        time.sleep(0.1)
    rows = journal(engine, scheduled_minute=boundary)
    assert all(len(r.attempts) == 1 and r.attempts[0]["status"] == "success" for r in rows), rows
    assert 0 < len(begins) <= count // threads // 2, f"{len(begins)} begin statements for {count} occurrences"


def test_a_runner_cancelled_after_its_begin_ahead_ends_interrupted_without_its_handler(engine: Engine,
                                                                                     make_node: Any) -> None:
    """A begin written ahead, then the task deleted before a thread took the runner: the handler
    is never called, the execution ends ``interrupted`` (slot freed), and the begun attempt is
    closed as interrupted -- not left open, which would read as a handler that may have run."""
    import uuid

    from scheduler_core.runtime.recovery import claimed_execution
    from scheduler_core.runtime.runner import Ownership, Runner
    from scheduler_core.statuses import Trigger
    from scheduler_core.store import ClaimOutcome, ClaimRequest

    called: list[str] = []
    node = make_node(hooks={"on_task_execute": lambda event: called.append(event.context.occurrence_id)})
    task = node.register(TaskDefinition(id="ahead-cancelled", name="Ahead cancelled", cron="0 0 1 1 *"))
    ctx = node.context()
    request = ClaimRequest(occurrence_id=str(uuid.uuid4()), task_id=task.id, task_revision=task.revision,
                           trigger=Trigger.MANUAL, max_attempts=1, token=str(uuid.uuid4()))
    assert [r.outcome for r in ctx.executions.claim([request])] == [ClaimOutcome.CLAIMED]
    runner = Runner(ctx, Ownership(claimed_execution(request, ctx.node_id), request.token, task, []))
    ctx.register_runner(runner)
    assert runner.can_begin_ahead
    assert runner.begin_ahead().result(10) is True
    [begun] = journal(engine, occurrence_id=request.occurrence_id)
    assert [a["status"] for a in begun.attempts] == [None]
    runner.signal.cancel("deleted")
    runner.start()
    record = runner.done.result(10)
    [row] = journal(engine, occurrence_id=request.occurrence_id)
    assert called == [] and (row.status, row.reason) == ("interrupted", "deleted"), record
    assert [(a["status"], a["error"]) for a in row.attempts] == [
        ("interrupted", "cancelled before its handler was called: deleted")]
    with engine.connect() as conn:
        assert conn.execute(select(slots.c.occurrence_id).where(slots.c.task_id == task.id)).scalar() is None
