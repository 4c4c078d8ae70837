"""The run grid's journal read (``JournalQueries.recent_runs``, the /runs/ page): the newest N
occurrences of each task on the page, oldest first, ties on ``created_at`` broken by the
occurrence id -- and work bounded by tasks x N however long each task's history is. A task that
has run every minute for a year has half a million journal rows; the page shows 20 of them.

Bounded is read from each database's own account of the work, not from wall time:
PostgreSQL's ``EXPLAIN ANALYZE`` (rows out of every plan node that reads the journal), MariaDB's
session handler counters (index entries read), SQLite's virtual-machine steps (its progress
handler), compared between a short and a long history."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.tables import executions
from scheduler_core.store.journal_queries import JournalQueries, recent_runs_query
from tests.helpers.journal import execution_row, insert_rows

RUNS = 20


def _history(engine: Engine, task_id: str, count: int, start: int = 1_700_000_000_000) -> None:
    """``count`` journal rows of ``task_id``, a second apart, in 5,000-row inserts."""
    for low in range(0, count, 5_000):
        insert_rows(engine, executions, (execution_row(f"{task_id}-{i:06d}", start + i * 1_000, "success", task_id)
                                         for i in range(low, min(count, low + 5_000))))


def test_each_task_shows_its_newest_runs_oldest_first_ties_by_occurrence_id(engine: Engine) -> None:
    rng = random.Random(17)
    rows = []
    for t in range(7):
        for i in range(rng.randrange(0, 45)):  # some tasks never ran, some have fewer than RUNS
            # few distinct instants: many rows share created_at, the occurrence id decides
            rows.append(execution_row(f"occ-{rng.randrange(10**9):09d}-{t}-{i}", 1_000 * rng.randrange(12),
                                      rng.choice(("success", "failed", "unknown")), f"task-{t}"))
    insert_rows(engine, executions, rows)
    asked = [f"task-{t}" for t in range(9)]  # task-7 and task-8 have no rows at all
    found = JournalQueries(engine).recent_runs(asked, RUNS)
    expected: dict[str, list[str]] = {}
    for row in sorted(rows, key=lambda r: (r["created_at"], r["occurrence_id"])):
        expected.setdefault(row["task_id"], []).append(row["occurrence_id"])
    expected = {task: ids[-RUNS:] for task, ids in expected.items()}
    assert {task: [cell.occurrence_id for cell in cells] for task, cells in found.items()} == expected
    by_id = {row["occurrence_id"]: row for row in rows}
    for cells in found.values():
        for cell in cells:
            assert (cell.status, cell.created_at) == (by_id[cell.occurrence_id]["status"],
                                                      by_id[cell.occurrence_id]["created_at"])
    assert JournalQueries(engine).recent_runs([], RUNS) == {}
    one = JournalQueries(engine).recent_runs(["task-0", "task-0"], 3)  # repeated ids read once
    assert [c.occurrence_id for c in one.get("task-0", [])] == expected.get("task-0", [])[-3:]


# --- the work each database reports ------------------------------------------------------


def _postgresql_rows_read(conn: Connection, sql: str) -> int:
    """The most rows any plan node reading ``executions`` produced, over all its loops."""
    plan = conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()
    worst = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal worst
        if node.get("Relation Name") == "executions":
            worst = max(worst, int(node["Actual Rows"]) * int(node.get("Actual Loops", 1)))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return worst


def _mysql_rows_read(conn: Connection, sql: str) -> int:
    """Index entries and rows the server's handlers read for ``sql`` (session counters)."""
    def counters() -> int:
        found = conn.execute(text("SHOW SESSION STATUS LIKE 'Handler_read%'")).all()
        return sum(int(value) for name, value in found if name != "Handler_read_rnd_deleted")

    first = counters()
    itself = counters() - first  # what reading the counters adds to them
    before = counters()
    conn.execute(text(sql)).all()
    return counters() - before - itself


def _sqlite_steps(conn: Connection, sql: str) -> int:
    """Virtual-machine steps (in hundreds) SQLite takes to answer ``sql``."""
    raw = conn.connection.dbapi_connection
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    raw.set_progress_handler(step, 100)  # type: ignore[union-attr]
    try:
        conn.execute(text(sql)).all()
    finally:
        raw.set_progress_handler(None, 100)  # type: ignore[union-attr]
    return steps[0]


def _work(engine: Engine, task_ids: list[str]) -> int:
    built = recent_runs_query(task_ids, RUNS)
    assert built is not None
    query, params = built
    sql = str(query.params(**params).compile(engine, compile_kwargs={"literal_binds": True}))
    measure: Callable[[Connection, str], int] = {
        "postgresql": _postgresql_rows_read, "mysql": _mysql_rows_read, "sqlite": _sqlite_steps}[engine.dialect.name]
    with engine.connect() as conn:
        conn.execute(text(sql)).all()  # warm: the statistics and the caches
        work = measure(conn, sql)
        conn.rollback()
    return work


def test_the_read_does_not_grow_with_each_tasks_history(engine: Engine) -> None:
    tasks = ["short-a", "short-b", "long-a", "long-b"]
    for task_id in tasks[:2]:
        _history(engine, task_id, RUNS + 5)
    for task_id in tasks[2:]:
        _history(engine, task_id, 6_000)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE executions"))
    found = JournalQueries(engine).recent_runs(tasks, RUNS)
    assert all(len(found[t]) == RUNS for t in tasks)
    short, long = _work(engine, tasks[:2]), _work(engine, tasks[2:])
    if engine.dialect.name == "postgresql":
        assert long <= RUNS + 1, f"a plan node read {long} journal rows for {RUNS} runs of a task"
    elif engine.dialect.name == "mysql":
        # index entries, and the UNION's temporary table written and read back: a few per run
        assert long <= 5 * 2 * RUNS, f"the handlers read {long} rows for 2 x {RUNS} runs"
    # and everywhere: 240 times the history, about the same work
    assert long <= 2 * short + 5, f"short histories took {short}, long ones {long}"
