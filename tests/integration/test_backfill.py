"""Backfill on every database (docs/semantics.md S11): a range's fire minutes (the task's cron, zone,
DST rule and calendar) are queued with their cron occurrence ids and trigger ``backfill``; a minute
that ran, runs or waits is left as it is, one journaled missed or skipped (never run) is queued
again; a dry run changes nothing; bad input is refused naming the field, changing nothing; the
runs go one at a time in minute order; two backfills at once queue each minute once. The
multi-process run is tests/multinode/test_backfill.py."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from scheduler_core import TaskDefinition
from scheduler_core.cron import MINUTE_MS, cron_occurrence_id
from scheduler_core.db.tables import audit_log, executions
from scheduler_core.errors import ConfigError, TaskNotFoundError
from scheduler_core.runtime.backfill import BACKFILL_MAX
from scheduler_core.store import ClaimOutcome, ClaimRequest, ExecutionRepository, TaskRepository
from scheduler_core.store.handoff import HandoffRepository, Missed
from scheduler_core.store.journal import backfill as journal_backfill
from scheduler_core.testing import set_clock_offset
from tests.helpers.node_cluster import db_now, journal

HOUR_MS = 60 * MINUTE_MS


def _at(engine: Engine, when_ms: int) -> None:
    """Move the DB clock so that it reads about ``when_ms`` now."""
    set_clock_offset(engine, 0)
    set_clock_offset(engine, when_ms - db_now(engine))


def _hour(now: int, back: int) -> int:
    """The start of the hour ``back`` hours before the one ``now`` is in."""
    return now - now % HOUR_MS - back * HOUR_MS


def _request(task_id: str, minute: int, trigger: str = "cron") -> ClaimRequest:
    return ClaimRequest(cron_occurrence_id(task_id, minute), task_id, 1, trigger, 1, str(uuid.uuid4()),
                        scheduled_minute=minute)


def _rows(engine: Engine, task_id: str) -> dict[int, tuple[str, str, str | None]]:
    return {int(r.scheduled_minute): (r.status, r.trigger, r.reason) for r in journal(engine, task_id=task_id)}


def _audits(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        found = list(conn.execute(select(audit_log).where(audit_log.c.action == "task.backfill")))
        conn.rollback()
    return found


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(executions)).scalar_one()
        conn.rollback()
    return int(n)


def test_past_minutes_are_queued_once_and_what_ran_is_left(make_node: Any, engine: Engine) -> None:
    node = make_node()
    node.register(TaskDefinition(id="rep", name="rep", cron="0 * * * *"))
    now = db_now(engine)
    h = [_hour(now, back) for back in (6, 5, 4, 3, 2, 1)]  # six past fire minutes, oldest first
    execs = ExecutionRepository(engine, "other", 600_000)
    handoff = HandoffRepository(execs)
    (ran,) = execs.claim([_request("rep", h[1])])  # runs (holds the slot)
    assert ran.outcome == ClaimOutcome.CLAIMED
    (busy,) = execs.claim([_request("rep", h[2])])  # the slot was held: skipped, never ran
    assert busy.outcome == ClaimOutcome.SKIPPED
    handoff.journal_missed([Missed(_request("rep", h[3]), "no_node_running"),  # one missed minute
                            Missed(_request("rep", h[4]), "no_node_running", until=h[4], count=3)])  # a summary
    before = _rows(engine, "rep")

    preview = node.backfill("rep", h[0], h[5], by="alice", dry_run=True)
    assert (preview.count, preview.first_ms, preview.last_ms) == (6, h[0], h[5])
    assert (preview.new, preview.again, preview.already, preview.queued) == (2, 2, 2, 0)
    assert _rows(engine, "rep") == before and not _audits(engine), "a dry run changes nothing"

    done = node.backfill("rep", h[0], h[5], by="alice", reason="the warehouse was down")
    assert (done.count, done.new, done.again, done.already, done.queued) == (6, 2, 2, 2, 4)
    rows = _rows(engine, "rep")
    for minute in (h[0], h[2], h[3], h[5]):
        assert rows[minute] == ("queued", "backfill", None), (minute, rows[minute])
    assert rows[h[1]] == before[h[1]] and rows[h[4]] == before[h[4]], "what runs, and a summary row, stay"
    for row in journal(engine, task_id="rep", trigger="backfill"):
        assert row.occurrence_id == cron_occurrence_id("rep", int(row.scheduled_minute))
        assert (row.source, row.owner_node, row.attempt, row.missed_count) == ("alice", None, 0, None)
    (audit,) = _audits(engine)
    assert (audit.actor, audit.target, audit.reason) == ("alice", "rep", "the warehouse was down")
    assert (audit.after["queued"], audit.after["new"], audit.after["again"], audit.after["already"]) == (4, 2, 2, 2)

    again = node.backfill("rep", h[0], h[5], by="alice")  # the same range again: nothing more
    assert (again.new, again.again, again.already, again.queued) == (0, 0, 6, 0)
    assert _rows(engine, "rep") == rows


@pytest.mark.parametrize(("args", "field"), [
    ({"start_ms": "yesterday"}, "start_ms"),
    ({"start_ms": -1}, "start_ms"),
    ({"start_ms": True}, "start_ms"),
    ({"end_ms": None}, "end_ms"),
    ({"start_ms": 2, "end_ms": 1}, "end_ms"),  # reversed
    ({"end_ms": 2**53 - 1}, "end_ms"),  # the last unix ms there is: in the future, said without a date (was a 500)
    ({"end_ms": "future"}, "end_ms"),
    ({"end_ms": "current"}, "end_ms"),  # the current minute is the scheduler's
    ({"start_ms": "far"}, "end_ms"),  # over the cap
    ({"by": "a\tb"}, "by"),
    ({"by": 7}, "by"),
    ({"reason": "x" * 501}, "reason"),
    ({"reason": "nul\x00"}, "reason"),
    ({"dry_run": "yes"}, "dry_run"),
    ({"task_id": ""}, "task_id"),
])
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(make_node: Any, engine: Engine,
                                                                  args: dict[str, Any], field: str) -> None:
    node = make_node()
    node.register(TaskDefinition(id="rep", name="rep", cron="* * * * *"))
    now = db_now(engine)
    current = now - now % MINUTE_MS
    values: dict[str, Any] = {"task_id": "rep", "start_ms": current - 10 * MINUTE_MS, "end_ms": current - MINUTE_MS,
                              "by": "alice", "reason": None, "dry_run": False, **args}
    values["end_ms"] = {"future": current + HOUR_MS, "current": current}.get(values["end_ms"], values["end_ms"])
    if values["start_ms"] == "far":
        values["start_ms"] = current - (BACKFILL_MAX + 1) * MINUTE_MS
    task_id = values.pop("task_id")
    with pytest.raises(ConfigError) as raised:
        node.backfill(task_id, **values)
    assert raised.value.field == field, raised.value
    assert _count(engine) == 0 and not _audits(engine)


def test_exactly_the_cap_is_allowed_and_an_unknown_task_is_named(make_node: Any, engine: Engine) -> None:
    node = make_node()
    node.register(TaskDefinition(id="rep", name="rep", cron="* * * * *"))
    now = db_now(engine)
    current = now - now % MINUTE_MS
    preview = node.backfill("rep", current - BACKFILL_MAX * MINUTE_MS, current - MINUTE_MS, dry_run=True)
    assert (preview.count, preview.new) == (BACKFILL_MAX, BACKFILL_MAX)
    with pytest.raises(TaskNotFoundError):
        node.backfill("nope", current - MINUTE_MS, current - MINUTE_MS)
    assert _count(engine) == 0


def test_the_range_follows_the_zone_dst_and_calendar(make_node: Any, engine: Engine) -> None:
    """Europe/Berlin's fall-back day (2026-10-25, 02:00-03:00 twice): an elapsed-time schedule fires
    in both passes (25 hours), a wall-clock one in the first only; an excluded date is no fire."""
    node = make_node()
    berlin = ZoneInfo("Europe/Berlin")
    _at(engine, int(datetime(2026, 11, 2, 12, tzinfo=berlin).timestamp() * 1000))
    day = int(datetime(2026, 10, 25, tzinfo=berlin).timestamp() * 1000)
    end = int(datetime(2026, 10, 26, tzinfo=berlin).timestamp() * 1000) - MINUTE_MS
    node.register(TaskDefinition(id="hourly", name="hourly", cron="0 * * * *", timezone="Europe/Berlin"))
    node.register(TaskDefinition(id="nightly", name="nightly", cron="0 2 * * *", timezone="Europe/Berlin",
                                 calendar={"exclude": ["2026-10-24"]}))
    hourly = node.backfill("hourly", day, end, dry_run=True)
    assert hourly.count == 25 and hourly.first_ms == day
    week = node.backfill("nightly", day - 3 * 86_400_000, end, dry_run=True)  # Oct 22..25, the 24th excluded
    assert week.count == 3
    assert week.last_ms == int(datetime(2026, 10, 25, 2, tzinfo=berlin, fold=0).timestamp() * 1000)


def test_runs_go_one_at_a_time_in_minute_order_and_count_no_scheduled_run(make_node: Any, engine: Engine) -> None:
    spans: list[tuple[int, float, float]] = []
    lock = threading.Lock()

    def slow(event: Any) -> None:
        started = time.monotonic()
        time.sleep(0.3)
        with lock:
            spans.append((event.context.scheduled_minute, started, time.monotonic()))

    node = make_node(hooks={"on_task_execute": slow})
    node.register(TaskDefinition(id="rep", name="rep", cron="0 * * * *", max_runs=2, pause_on_failure=1))
    now = db_now(engine)
    minutes = [_hour(now, back) for back in (4, 3, 2, 1)]
    node.start()
    done = node.backfill("rep", minutes[0], minutes[-1], by="alice")
    assert done.queued == 4
    deadline = time.monotonic() + 30
    while len([r for r in journal(engine, task_id="rep") if r.status == "success"]) < 4:
        assert time.monotonic() < deadline, _rows(engine, "rep")
        time.sleep(0.05)
    assert [s[0] for s in spans] == minutes, "in minute order"
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans)), f"never two at once: {spans}"
    assert {r.trigger for r in journal(engine, task_id="rep")} == {"backfill"}
    task = TaskRepository(engine).get("rep")
    assert task is not None and task.enabled and task.runs_counted == 0, "a backfill run is not a scheduled run"


def test_two_backfills_at_once_queue_each_minute_once(make_node: Any, engine: Engine) -> None:
    nodes = [make_node(), make_node()]
    nodes[0].register(TaskDefinition(id="rep", name="rep", cron="*/5 * * * *"))
    now = db_now(engine)
    start, end = _hour(now, 3), _hour(now, 1)
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def run(node: Any, who: str) -> None:
        barrier.wait()
        results.append(node.backfill("rep", start, end, by=who))

    threads = [threading.Thread(target=run, args=(n, w)) for n, w in zip(nodes, ("alice", "bob"), strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2 and {r.count for r in results} == {25}
    assert sorted(r.queued for r in results) == [0, 25] and sum(r.already for r in results) == 25
    assert len(journal(engine, task_id="rep")) == 25 and len(_audits(engine)) == 2


def test_a_backfill_waits_for_one_in_flight_and_counts_only_what_it_queued(make_node: Any, engine: Engine) -> None:
    """Another backfill of the task holds its rows uncommitted: this one waits for it (the task's
    lock row) and then finds every minute queued already, instead of reading an empty journal,
    inserting nothing over the other's rows and reporting them as its own."""
    node = make_node()
    node.register(TaskDefinition(id="rep", name="rep", cron="*/5 * * * *"))
    now = db_now(engine)
    start, end = _hour(now, 3), _hour(now, 1)
    requests = [ClaimRequest(cron_occurrence_id("rep", m), "rep", 1, "backfill", 1, str(uuid.uuid4()), source="alice",
                             scheduled_minute=m) for m in range(start, end + 1, 5 * MINUTE_MS)]
    results: list[Any] = []
    with engine.connect() as conn:
        with conn.begin():
            assert len(journal_backfill(conn, requests).new) == 25  # alice's, in flight
            bob = threading.Thread(target=lambda: results.append(node.backfill("rep", start, end, by="bob")))
            bob.start()
            time.sleep(0.5)  # bob reaches the task's lock row (without one: his pre-read, then his inserts)
        bob.join(60)
    (result,) = results
    assert (result.count, result.new, result.again, result.already, result.queued) == (25, 0, 0, 25, 0)
    assert len(journal(engine, task_id="rep")) == 25
