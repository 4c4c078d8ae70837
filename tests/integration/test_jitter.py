"""Jitter on every database (docs/semantics.md O8): a jittered cron occurrence is journaled
``queued`` (reason ``jitter``) at its minute with its delayed start, claimed by no node before
that, and then run; at a held slot it meets its task's overlap policy; its fire lateness is
counted from its delayed start. The delay is a function of the occurrence id alone; bad values are
refused naming ``jitter_ms``. The multi-process run is tests/multinode/test_jitter.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS, cron_occurrence_id
from scheduler_core.cron.jitter import jitter_delay, shortest_gap_ms
from scheduler_core.db.tables import executions, metric_totals
from scheduler_core.errors import ConfigError
from scheduler_core.model import JITTER_MAX_MS, validate_task
from scheduler_core.store import ClaimOutcome, ClaimRequest, ExecutionRepository
from scheduler_core.store.handoff import HandoffRepository
from scheduler_core.store.totals import LATENESS, LATENESS_SUM
from scheduler_core.testing import clock_offset, set_clock_offset
from tests.helpers.journal import db_now, enter_minute, wait_for_status

T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS


def _row(engine: Engine, occurrence: str) -> Any:
    with engine.connect() as conn:
        found = conn.execute(select(executions).where(executions.c.occurrence_id == occurrence)).one()
        conn.rollback()
    return found


def _request(task_id: str, minute: int, not_before: int | None, waiting_limit: int = 0) -> ClaimRequest:
    return ClaimRequest(cron_occurrence_id(task_id, minute), task_id, 1, "cron", 1, str(uuid.uuid4()),
                        scheduled_minute=minute, not_before=not_before, waiting_limit=waiting_limit)


def test_the_delay_is_the_occurrence_ids_and_bounded() -> None:
    delays = [jitter_delay("sync", T0 + i * MINUTE_MS, 30_000) for i in range(2000)]
    assert delays == [jitter_delay("sync", T0 + i * MINUTE_MS, 30_000) for i in range(2000)]  # every node
    assert min(delays) >= 0 and max(delays) <= 30_000 and len(set(delays)) > 1500
    assert sum(d < 15_000 for d in delays) in range(900, 1100)  # spread over the whole range
    assert jitter_delay("sync", T0, None) == 0 and jitter_delay("other", T0, 30_000) != delays[0]
    task = validate_task(TaskDefinition(id="sync", name="s", cron="* * * * *", jitter_ms=30_000))
    assert task.start_of(T0) == T0 + delays[0] and task.delayed_start(T0) == T0 + delays[0]


@pytest.mark.parametrize(("cron", "jitter", "ok"), [
    ("* * * * *", 30_000, True), ("* * * * *", 30_001, False), ("*/5 * * * *", 150_000, True),
    ("*/5 * * * *", 150_001, False), ("0 9 * * 1-5", JITTER_MAX_MS, True), ("0 9 * * 1-5", JITTER_MAX_MS + 1, False),
    ("0 * * * *", 0, False), ("0 * * * *", -5, False), ("0 * * * *", "60s", False), ("0 * * * *", True, False),
    ("30 2 * * *", 42_300_000, True),  # Berlin's spring change makes one gap 23.5 h: half is 11.75 h
    ("30 2 * * *", 42_300_001, False),
])
def test_a_jitter_is_at_most_half_the_shortest_gap(cron: str, jitter: Any, ok: bool) -> None:
    task = TaskDefinition(id="j", name="j", cron=cron, timezone="Europe/Berlin", jitter_ms=jitter)
    if ok:
        assert validate_task(task).jitter_ms == jitter
    else:
        with pytest.raises(ConfigError) as refused:
            validate_task(task)
        assert refused.value.field == "jitter_ms"
    assert shortest_gap_ms("*/5 * * * *", "UTC") == 300_000


def test_a_jittered_claim_waits_queued_until_its_delayed_start(make_node: Any, engine: Engine) -> None:
    node = make_node()
    node.register(TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=20_000))
    now = db_now(engine)
    minute = now - now % MINUTE_MS
    start = now + 60_000  # well after now: no node claims it yet
    claimer = ExecutionRepository(engine, "claimer", 60_000)
    (result,) = claimer.claim([_request("jit", minute, start)])
    assert result.outcome == ClaimOutcome.WAITING
    row = _row(engine, cron_occurrence_id("jit", minute))
    assert (row.status, row.reason, row.next_attempt_at, row.owner_node, row.lease_until) == (
        "queued", "jitter", start, None, None)
    handoff = HandoffRepository(claimer)
    assert handoff.queued(10) == [] and handoff.next_delayed() == start
    set_clock_offset(engine, 61_000)  # its delayed start has come
    (due,) = handoff.queued(10)
    assert (due.occurrence_id, due.not_before) == (row.occurrence_id, start)
    assert handoff.next_delayed() is None


def test_a_claim_of_many_jittered_ones_delays_each_to_its_own_start_in_one_statement(engine: Engine) -> None:
    """A busy minute of jittered tasks: the claim's delay is one UPDATE, whatever the count, and
    each row keeps its own delayed start."""
    now = db_now(engine)
    minute = now - now % MINUTE_MS
    requests = [_request(f"jit-{i}", minute, now + 10_000 + 997 * i) for i in range(30)]
    delays: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE EXECUTIONS") and "next_attempt_at" in statement:
            delays.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        results = ExecutionRepository(engine, "claimer", 60_000).claim(requests)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert {r.outcome for r in results} == {ClaimOutcome.WAITING}
    assert len(delays) == 1, delays
    for r in requests:
        row = _row(engine, r.occurrence_id)
        assert (row.status, row.reason, row.next_attempt_at) == ("queued", "jitter", r.not_before)


@pytest.mark.parametrize(("waiting_limit", "outcome", "status", "reason"), [
    (0, ClaimOutcome.SKIPPED, "skipped", "slot_busy"),  # overlap skip: as at its minute
    (1, ClaimOutcome.WAITING, "queued", "buffered"),  # a policy that buffers: it waits for the slot
])
def test_at_a_held_slot_a_jittered_one_meets_its_overlap_policy(make_node: Any, engine: Engine, waiting_limit: int,
                                                               outcome: str, status: str, reason: str) -> None:
    make_node().register(TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=20_000))
    claimer = ExecutionRepository(engine, "claimer", 60_000)
    handoff = HandoffRepository(claimer)
    now = db_now(engine)
    minute = now - now % MINUTE_MS
    (held,) = claimer.claim([_request("jit", minute - MINUTE_MS, None)])  # the minute before still runs
    assert held.outcome == ClaimOutcome.CLAIMED
    assert claimer.claim([_request("jit", minute, now - 1)])[0].outcome == ClaimOutcome.WAITING
    (due,) = handoff.queued(10)
    request = ClaimRequest(due.occurrence_id, "jit", 1, "cron", 1, str(uuid.uuid4()), scheduled_minute=minute,
                           not_before=due.not_before, waiting_limit=waiting_limit)
    assert handoff.claim_queued([request])[0].outcome == outcome
    row = _row(engine, due.occurrence_id)
    assert (row.status, row.reason) == (status, reason)


def test_a_node_runs_it_at_its_delayed_start_and_counts_lateness_from_there(make_node: Any, engine: Engine) -> None:
    ran: list[tuple[str, float]] = []
    node = make_node(hooks={"on_task_execute": lambda event: ran.append((event.context.occurrence_id,
                                                                          time.monotonic())) or "ok"})
    minute = enter_minute(engine, seconds_into=0.5)
    node.register(TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=4_000,
                                 calendar={"active_from_ms": minute, "active_until_ms": minute + MINUTE_MS}))
    occurrence = cron_occurrence_id("jit", minute)
    delay = jitter_delay("jit", minute, 4_000)
    node.start()
    deadline = time.monotonic() + 30
    while not _journaled(engine, occurrence):
        assert time.monotonic() < deadline, "the node did not journal its minute"
        time.sleep(0.05)
    done = wait_for_status(node, occurrence, "success", timeout=30)
    row = _row(engine, occurrence)
    assert (row.next_attempt_at, row.trigger, row.sequence) == (minute + delay, "cron", 1)
    (attempt,) = done.attempts
    assert attempt.started_at >= minute + delay, (attempt.started_at - minute, delay)
    assert [occ for occ, _ in ran] == [occurrence]
    with engine.connect() as conn:  # counted from its delayed start, not from its minute
        late = conn.execute(select(metric_totals.c.value).where(
            metric_totals.c.metric == LATENESS, metric_totals.c.scope == "jit", metric_totals.c.label == LATENESS_SUM,
        )).scalar_one()
        conn.rollback()
    assert late == attempt.started_at - (minute + delay)


def _journaled(engine: Engine, occurrence: str) -> bool:
    with engine.connect() as conn:
        found = conn.execute(select(executions.c.status).where(executions.c.occurrence_id == occurrence)).first()
        conn.rollback()
    return found is not None


def test_a_jittered_one_waits_for_the_database_clock_across_a_jump(make_node: Any, engine: Engine) -> None:
    """The database clock jumps ahead while a jittered occurrence waits (a failover to a server
    whose clock is ahead): its delayed start is an instant of the database clock, so the first
    scan after the jump runs it, once -- not the rest of the jitter later by the node's clock."""
    ran: list[str] = []
    node = make_node(hooks={"on_task_execute": lambda event: ran.append(event.context.occurrence_id) or "ok"})
    minute = enter_minute(engine, seconds_into=0.5)
    task_id = next(t for t in (f"jump-{i}" for i in range(1_000)) if jitter_delay(t, minute, 20_000) >= 12_000)
    delay = jitter_delay(task_id, minute, 20_000)
    node.register(TaskDefinition(id=task_id, name="jump", cron="* * * * *", jitter_ms=20_000,
                                 calendar={"active_from_ms": minute, "active_until_ms": minute + MINUTE_MS}))
    occurrence = cron_occurrence_id(task_id, minute)
    node.start()
    deadline = time.monotonic() + 30
    while not _journaled(engine, occurrence):
        assert time.monotonic() < deadline, "the node did not journal its minute"
        time.sleep(0.05)
    waiting = _row(engine, occurrence)
    assert (waiting.status, waiting.reason, waiting.next_attempt_at) == ("queued", "jitter", minute + delay)
    time.sleep(0.5)  # a few ticks: the node has seen the row wait, and knows when it starts
    set_clock_offset(engine, clock_offset(engine) + minute + delay + 1_000 - db_now(engine))  # past its start
    done = wait_for_status(node, occurrence, "success", timeout=(delay - 6_000) / 1000)  # at least 6 s early
    (attempt,) = done.attempts
    assert attempt.started_at >= minute + delay and ran == [occurrence]


def test_a_start_that_comes_between_the_scans_two_reads_is_not_forgotten(make_node: Any, engine: Engine,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan reads the rows due now, then when the next delayed start comes. A jittered row whose
    start falls between those two reads was in neither: the node, seeing no newer row, must still
    scan again and run it (CI once saw one left queued for good)."""
    ran: list[str] = []
    node = make_node(hooks={"on_task_execute": lambda event: ran.append(event.context.occurrence_id) or "ok"})
    now = db_now(engine)
    minute = now - now % MINUTE_MS
    node.register(TaskDefinition(id="jit", name="jit", cron="* * * * *", jitter_ms=20_000,
                                 calendar={"active_from_ms": minute, "active_until_ms": minute + MINUTE_MS}))
    start = now + 30_000
    claimer = ExecutionRepository(engine, "claimer", 60_000)
    assert claimer.claim([_request("jit", minute, start)])[0].outcome == ClaimOutcome.WAITING
    real_queued, moved = HandoffRepository.queued, []

    def queued_then_its_start_comes(self: HandoffRepository, limit: int) -> list[Any]:
        rows = real_queued(self, limit)
        if not moved and not rows:  # it was not due: its start comes before the scan's next read
            moved.append(True)
            set_clock_offset(engine, clock_offset(engine) + start + 1_000 - db_now(engine))
        return rows

    monkeypatch.setattr(HandoffRepository, "queued", queued_then_its_start_comes)
    node.start()
    occurrence = cron_occurrence_id("jit", minute)
    done = wait_for_status(node, occurrence, "success", timeout=15)
    assert moved and ran == [occurrence] and done.attempts[0].started_at >= start
