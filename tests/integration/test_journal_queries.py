"""The dashboard's reads of the journal and the logs, on every database: keyset pages walked
both ways (ties included), filters, bounded counts, the hourly chart on the DB clock, and
repair-all draining the log failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler
from scheduler_core.db.tables import executions, logs, tasks
from scheduler_core.errors import ConfigError
from scheduler_core.store.journal_queries import HOUR_MS, BoundedCount, Cursor, KeysetPage
from tests.helpers.journal import db_now, execution_row, insert_rows, journal_pending, log_row

HOUR = HOUR_MS


def walk(fetch: Callable[..., KeysetPage[Any]], ident: Callable[[Any], str]) -> tuple[list[str], list[str]]:
    """Every row id reached through "Older" from the first page, then back through "Newer"."""
    pages: list[list[str]] = []
    page = fetch()
    pages.append([ident(r) for r in page.rows])
    while page.older is not None:
        page = fetch(before=page.older.token())  # as the "Older" link carries it
        pages.append([ident(r) for r in page.rows])
    older_walk = [i for p in pages for i in p]
    back: list[list[str]] = [[ident(r) for r in page.rows]]
    while page.newer is not None:
        page = fetch(after=page.newer)
        back.insert(0, [ident(r) for r in page.rows])
    return older_walk, [i for p in back for i in p]


# --- keyset pages ----------------------------------------------------------------------------


def test_journal_pages_walk_every_row_once_with_ties(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    rows = [execution_row(f"occ-{i:03d}", 10_000 + i // 4, ("success", "failed", "unknown")[i % 3],
                          task_id=("a", "b")[i % 2]) for i in range(23)]  # four rows per created_at
    insert_rows(engine, executions, rows)
    newest_first = sorted(rows, key=lambda r: (r["created_at"], r["occurrence_id"]), reverse=True)

    def expected(**where: str) -> list[str]:
        return [r["occurrence_id"] for r in newest_first if all(r[k] == v for k, v in where.items())]

    def ident(e: Any) -> str:
        return str(e.occurrence_id)

    for status, task_id in ((None, None), ("failed", None), (None, "b"), ("success", "a")):
        older, back = walk(lambda s=status, t=task_id, **c: scheduler.execution.page(s, t, 5, **c), ident)
        where = {k: v for k, v in (("status", status), ("task_id", task_id)) if v}
        assert older == expected(**where), (status, task_id)
        assert back == older, (status, task_id)  # Newer pages lead back to the very first page

    first = scheduler.execution.page(limit=5)
    assert first.newer is None and first.older == Cursor(first.rows[-1].created_at, first.rows[-1].occurrence_id)
    second = scheduler.execution.page(limit=5, before=first.older)
    assert second.newer == Cursor(second.rows[0].created_at, second.rows[0].occurrence_id)
    # A newer page part-way: the five rows just above the cursor, with both neighbours.
    above = scheduler.execution.page(limit=5, after=Cursor(second.rows[1].created_at, second.rows[1].occurrence_id))
    assert above.rows == [*first.rows[1:], second.rows[0]]
    assert (above.newer, above.older) == (Cursor(first.rows[1].created_at, first.rows[1].occurrence_id),
                                          Cursor(second.rows[0].created_at, second.rows[0].occurrence_id))
    # A newer page that reaches the top is the full first page.
    top = scheduler.execution.page(limit=5, after=Cursor(first.rows[2].created_at, first.rows[2].occurrence_id))
    assert top == first


def test_log_pages_filters_and_window(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    rows = [log_row(f"log-{i:03d}", 50_000 + (i // 3) * 10, ("success", "failed")[i % 2], ("x", "y", "z")[i % 3],
                    source=("cron-src", "ops")[i % 2] if i % 5 else None) for i in range(31)]
    insert_rows(engine, logs, rows)
    newest_first = sorted(rows, key=lambda r: (r["started_at"], r["id"]), reverse=True)

    def ident(log: Any) -> str:
        return str(log.id)

    cases: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
        ({}, lambda r: True),
        ({"status": "failed"}, lambda r: r["status"] == "failed"),
        ({"task_id": "y"}, lambda r: r["task_id"] == "y"),
        ({"trigger_source": "ops"}, lambda r: r["source"] == "ops"),
        ({"started_after": 50_020, "started_before": 50_070}, lambda r: 50_020 <= r["started_at"] < 50_070),
        ({"task_id": "x", "status": "success", "started_after": 50_010},
         lambda r: r["task_id"] == "x" and r["status"] == "success" and r["started_at"] >= 50_010),
    ]
    for where, keep in cases:
        older, back = walk(lambda w=where, **c: scheduler.execution.log_page(limit=4, **w, **c), ident)
        assert older == [r["id"] for r in newest_first if keep(r)], where
        assert back == older, where
    assert scheduler.execution.log("log-007") is not None and scheduler.execution.log("nope") is None


def test_empty_pages(make_node: Callable[..., Scheduler]) -> None:
    scheduler = make_node()
    assert scheduler.execution.page() == KeysetPage([], None, None)
    assert scheduler.execution.log_page(before="5.x") == KeysetPage([], None, None)


# --- counts, chart ------------------------------------------------------------------------


def test_bounded_counts_and_overview(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    insert_rows(engine, executions, [execution_row(f"p-{i}", 1_000 + i, "failed", log_persistence="pending")
                                     for i in range(7)])
    insert_rows(engine, executions, [execution_row(f"s-{i}", 1_000 + i, "success", log_persistence="persisted")
                                     for i in range(3)])
    assert scheduler.execution.log_failure_count(cap=5) == BoundedCount(5, True)
    assert scheduler.execution.log_failure_count(cap=7) == BoundedCount(7, False)
    assert scheduler.execution.log_failure_count().label == "7"
    assert BoundedCount(10_000, True).label == "10,000+"
    overview = scheduler.execution.overview(cap=5)
    assert overview.statuses["failed"] == BoundedCount(5, True)
    assert overview.statuses["success"] == BoundedCount(3, False)
    assert overview.statuses["running"] == BoundedCount(0, False)
    assert overview.log_failures == BoundedCount(5, True)
    with engine.connect() as conn:
        stored_tasks = conn.execute(select(func.count()).select_from(tasks)).scalar_one()
        conn.rollback()
    assert overview.tasks == stored_tasks
    assert overview.nodes_alive == 0  # not started: no heartbeat yet


def test_hourly_counts_per_db_clock_hour(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    now = db_now(engine)
    current = now // HOUR * HOUR
    rows = [execution_row("now-ok", now - 1, "success"), execution_row("now-bad", now - 2, "failed"),
            execution_row("h3-ok", current - 3 * HOUR + 5, "success"),
            execution_row("h3-unknown", current - 3 * HOUR + 6, "unknown"),
            execution_row("h3-interrupted", current - 3 * HOUR + 7, "interrupted"),
            execution_row("h23-skipped", current - 23 * HOUR, "skipped"),
            execution_row("too-old", current - 24 * HOUR - 1, "failed"),
            execution_row("future", current + 2 * HOUR, "failed")]
    insert_rows(engine, executions, rows)
    buckets = scheduler.execution.hourly(24)
    assert len(buckets) == 24 and buckets[-1].start == current and buckets[0].start == current - 23 * HOUR
    by_age = {(current - b.start) // HOUR: (b.total, b.failures) for b in buckets if b.total}
    assert by_age == {0: (2, 1), 3: (3, 2), 23: (1, 0)}


# --- repair all ------------------------------------------------------------------------------


def test_repair_all_drains_at_offset_zero(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    pending = journal_pending(engine, 130)  # more than one round of 100
    stuck = journal_pending(engine, 1, prefix="stuck")[0]
    attempt = scheduler.execution.get(stuck).attempts[0]
    # A log row that disagrees with the journal: this one cannot be repaired.
    insert_rows(engine, logs, [{**log_row(attempt.log_id, 1_000, task_id="stuck-0000"), "occurrence_id": stuck}])
    assert scheduler.execution.log_failure_count().value == 131
    result = scheduler.execution.repair_all()
    assert (result.repaired, result.failed, result.remaining, result.rounds) == (130, 1, BoundedCount(1, False), 3)
    assert [e.occurrence_id for e in scheduler.execution.list_log_failures()] == [stuck]
    assert all(scheduler.execution.get(o).log_persistence == "persisted" for o in pending[:3])
    again = scheduler.execution.repair_all()
    assert (again.repaired, again.failed, again.rounds) == (0, 1, 1)  # a round repairing nothing stops
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(logs)).scalar_one() == 131
        conn.rollback()


def test_repair_all_respects_max_rounds(make_node: Callable[..., Scheduler], engine: Engine) -> None:
    scheduler = make_node()
    journal_pending(engine, 105)
    result = scheduler.execution.repair_all(max_rounds=1)
    assert (result.repaired, result.remaining, result.rounds) == (100, BoundedCount(5, False), 1)


# --- validation --------------------------------------------------------------------------------


BAD_CALLS: list[tuple[Callable[[Scheduler], Any], str]] = [
    (lambda s: s.execution.page(status="nope"), "status"),
    (lambda s: s.execution.page(task_id=""), "task_id"),
    (lambda s: s.execution.page(task_id="x" * 129), "task_id"),
    (lambda s: s.execution.page(limit=0), "limit"),
    (lambda s: s.execution.page(limit=True), "limit"),
    (lambda s: s.execution.page(before="abc"), "before"),
    (lambda s: s.execution.page(before="-5.x"), "before"),
    (lambda s: s.execution.page(after="5."), "after"),
    (lambda s: s.execution.page(before="5.x", after="6.y"), "after"),
    (lambda s: s.execution.page(before=Cursor(2**60, "x")), "before"),
    (lambda s: s.execution.page(before=17), "before"),
    (lambda s: s.execution.log_page(status="running"), "status"),
    (lambda s: s.execution.log_page(trigger_source=5), "trigger_source"),
    (lambda s: s.execution.log_page(started_after=-1), "started_after"),
    (lambda s: s.execution.log_page(started_before="soon"), "started_before"),
    (lambda s: s.execution.log_page(limit=101), "limit"),
    (lambda s: s.execution.log(""), "log_id"),
    (lambda s: s.execution.log_failure_count(cap=0), "cap"),
    (lambda s: s.execution.overview(cap=-1), "cap"),
    (lambda s: s.execution.hourly(0), "hours"),
    (lambda s: s.execution.hourly(169), "hours"),
    (lambda s: s.execution.repair_all(0), "max_rounds"),
]


def test_bad_arguments_name_their_field(make_node: Callable[..., Scheduler]) -> None:
    scheduler = make_node()
    for call, field in BAD_CALLS:
        with pytest.raises(ConfigError) as raised:
            call(scheduler)
        assert raised.value.field == field
