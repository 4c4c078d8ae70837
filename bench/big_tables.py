"""Big tables: does a node's idle tick, a list page or retention get slower as the journal grows?

The journal (``executions``) and the logs are grown with synthetic rows generated inside the
database (PostgreSQL ``generate_series``, MySQL/MariaDB and SQLite a recursive CTE), a chunk of
``--chunk`` rows per statement: first to ``--base`` rows each (default 10,000), measured, then
to ``--rows`` rows each (default 100,000; the issue's target is 10,000,000), measured again.
The rows are finished occurrences of 100 synthetic tasks spread over the past
(``created_at`` one second apart, going back from now), 1 % of them ``failed``.

At each size, with ``--tasks`` registered tasks none of which is due:

- **idle tick**: an in-process node ticks ``--ticks`` times back to back (``Node.tick``): SQL
  statements per tick (SQLAlchemy ``before_cursor_execute``) and milliseconds p50 / p95;
- **list pages**: ``--samples`` reads of the dashboard's first journal page (50 rows, newest
  first), of the journal filtered by status ``failed``, of the first log page, of one task's
  journal page, and of the run grid's journal read (the newest 20 occurrences of each of 50
  tasks, each of which has a hundredth of the rows), p95 ms (``JournalQueries``, the queries the
  dashboard runs);
- **claim and finish**: ``--samples`` times, a claim of 100 due occurrences (journal rows
  inserted, slots taken: ``ExecutionRepository.claim``, one transaction) and their terminal
  commit with the log projection (``finish_many``): statements and milliseconds p50 / p95 each;
- **retention** (with ``--retention``, after the measurements at the larger size): log retention
  (``LogRepository.prune``, ``retention_days``) and journal retention (``JournalRetention.prune``,
  500-row batches) over rows made 40 days old: rows deleted per second, each beside its ceiling
  on the same table in the same run -- the same statement deleting up to 200,000 log rows or
  20,000 journal rows (at most a tenth of the table) in one transaction, which is what the
  database allows when nothing limits how long a lock is held -- and as a percentage of it.

    .venv/bin/python bench/big_tables.py --backend postgresql --rows 100000
    .venv/bin/python bench/big_tables.py --backend sqlite --backend mysql --rows 200000 --retention
    .venv/bin/python bench/big_tables.py --backend postgresql --rows 10000000 --chunk 500000   # about 30 min on 2 cores
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from _common import (
    Target,
    add_common_args,
    base_parser,
    db_now,
    finish,
    percentile,
    prepare,
    register_tasks,
    run_on_targets,
    scalar,
)
from limits import share
from sqlalchemy import delete, event, func, select, text, update
from sqlalchemy.engine import Connection, Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import close_engine, create_engine, db_now_ms, dialect_kind
from scheduler_core.db.tables import executions, logs
from scheduler_core.model import Attempt, TaskDefinition
from scheduler_core.runtime.recovery import claimed_execution
from scheduler_core.store.executions import ClaimRequest, ExecutionRepository, FinishRequest
from scheduler_core.store.journal_queries import JournalQueries
from scheduler_core.store.logs import LogFilter, LogRepository
from scheduler_core.store.retention import JournalRetention
from scheduler_core.store.transactions import write

DAY_MS = 86_400_000
COLUMNS = [("backend", "database"), ("rows", "journal rows = log rows"), ("grow_rows_per_s", "grown rows / s"),
           ("tick_statements", "idle tick statements"), ("tick_p50_ms", "tick p50 ms"), ("tick_p95_ms", "tick p95 ms"),
           ("claim_statements", "claim x100 statements"), ("claim_p50_ms", "claim x100 p50 ms"),
           ("claim_p95_ms", "p95 ms"), ("finish_statements", "finish x100 statements"),
           ("finish_p50_ms", "finish x100 p50 ms"), ("finish_p95_ms", "p95 ms"),
           ("journal_page_p95_ms", "journal page p95 ms"), ("failed_page_p95_ms", "failed page p95 ms"),
           ("log_page_p95_ms", "log page p95 ms"), ("task_page_p95_ms", "one task's page p95 ms"),
           ("grid_page_p95_ms", "run grid p95 ms"), ("log_prune_rows_per_s", "log retention rows / s"),
           ("log_ceiling_rows_per_s", "one-transaction delete rows / s"), ("log_prune_share", "% of it"),
           ("journal_prune_rows_per_s", "journal retention rows / s"),
           ("journal_ceiling_rows_per_s", "one-transaction delete rows / s"), ("journal_prune_share", "% of it")]
# rows the ceiling deletes in one transaction (at most a tenth of the table); the journal's batch is
# bound as a list of ids, which SQLite caps at 32,766 parameters
CEILING_ROWS = {"logs": 200_000, "journal": 20_000}


def _series(kind: str, first: int, last: int) -> str:
    """A row source ``g(n)`` of the integers first..last."""
    if kind == "postgresql":
        # bigint: n * 1000 (milliseconds back) passes int4 beyond 2,147,483 rows
        return f"generate_series({first}::bigint, {last}::bigint) AS g(n)"
    return (f"(WITH RECURSIVE s(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM s WHERE n < {last}) "
            f"SELECT n FROM s) AS g")


def _concat(kind: str, prefix: str, expression: str) -> str:
    return f"CONCAT('{prefix}', {expression})" if kind == "mysql" else f"'{prefix}' || {expression}"


def grow(engine: Engine, start: int, end: int, now_ms: int, chunk: int) -> float:
    """Journal and log rows numbered start..end-1 (both tables); returns rows per second."""
    kind = dialect_kind(engine)
    json_empty = "'[]'::jsonb" if kind == "postgresql" else "'[]'"
    began = time.perf_counter()
    for low in range(start, end, chunk):
        high = min(end, low + chunk) - 1
        source = _series(kind, low, high)
        at = f"({now_ms} - n * 1000)"
        status = "CASE WHEN n % 100 = 0 THEN 'failed' ELSE 'success' END"
        journal = (
            "INSERT INTO executions (occurrence_id, task_id, task_revision, \"trigger\", status, sequence, attempt, "
            "max_attempts, attempts, log_persistence, created_at, updated_at, scheduled_minute) "
            f"SELECT {_concat(kind, 'big-', 'n')}, {_concat(kind, 'bigtask-', 'n % 100')}, 1, 'cron', {status}, 1, 1, "
            f"1, {json_empty}, 'persisted', {at}, {at}, {at} - {at} % 60000 FROM {source}")
        log = (
            "INSERT INTO logs (id, occurrence_id, task_id, \"trigger\", status, sequence, attempt, node_id, "
            "started_at, finished_at, duration_ms, created_at) "
            f"SELECT {_concat(kind, 'biglog-', 'n')}, {_concat(kind, 'big-', 'n')}, "
            f"{_concat(kind, 'bigtask-', 'n % 100')}, 'cron', {status}, 1, 1, 'big', {at}, {at} + 5, 5, {at} "
            f"FROM {source}")
        if kind == "mysql":
            journal, log = journal.replace('"trigger"', "`trigger`"), log.replace('"trigger"', "`trigger`")

        def work(conn: Any, statements: tuple[str, str] = (journal, log)) -> None:
            if kind == "mysql":  # both stop a recursive CTE at 1000 rows unless told, by different names
                limit = "max_recursive_iterations" if getattr(engine.dialect, "is_mariadb", False) \
                    else "cte_max_recursion_depth"
                conn.execute(text(f"SET SESSION {limit} = {chunk + 10}"))
            for statement in statements:
                conn.execute(text(statement))

        write(engine, work)
    if kind == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE executions"))
            conn.execute(text("ANALYZE logs"))
    elif kind == "mysql":
        with engine.connect() as conn:
            conn.execute(text("ANALYZE TABLE executions, logs")).all()
    return (end - start) / max(1e-9, time.perf_counter() - began)


def idle_ticks(url: str, ticks: int) -> dict[str, Any]:
    engine = create_engine({"url": url, "pool_size": 12})  # what a node with the default 6 threads needs
    try:
        return _idle_ticks(engine, ticks)
    finally:
        close_engine(engine)


def _idle_ticks(engine: Engine, ticks: int) -> dict[str, Any]:
    scheduler = Scheduler(engine, SchedulerConfig(node_id="big-tables", tick_interval_ms=60_000))
    scheduler.init()
    counted = {"statements": 0}

    def count(*_: Any) -> None:
        counted["statements"] += 1

    try:
        scheduler.start()  # its loop ticks once now, then waits a minute: the ticks below are ours
        time.sleep(1.0)
        node = scheduler._node  # the bench drives the tick itself
        assert node is not None
        node.tick()  # warm
        durations = []
        event.listen(engine, "before_cursor_execute", count)
        try:
            for _ in range(ticks):
                began = time.perf_counter()
                node.tick()
                durations.append((time.perf_counter() - began) * 1000)
        finally:
            event.remove(engine, "before_cursor_execute", count)
    finally:
        scheduler.close()
    return {"tick_statements": round(counted["statements"] / ticks, 2),
            "tick_p50_ms": round(statistics.median(durations), 2), "tick_p95_ms": percentile(durations, 0.95)}


def pages(engine: Engine, samples: int) -> dict[str, Any]:
    queries = JournalQueries(engine)
    kinds = {"journal_page_p95_ms": lambda: queries.execution_page(None, None, 50),
             "failed_page_p95_ms": lambda: queries.execution_page("failed", None, 50),
             "log_page_p95_ms": lambda: queries.log_page(LogFilter(), 50),
             "task_page_p95_ms": lambda: queries.execution_page(None, "bigtask-7", 50),
             # the run grid (/runs/): the newest 20 occurrences of each of a page of 50 tasks, every
             # one of which has rows / 100 journal rows
             "grid_page_p95_ms": lambda: queries.recent_runs([f"bigtask-{i}" for i in range(50)], 20)}
    result = {}
    for name, load in kinds.items():
        load()  # warm
        times = []
        for _ in range(samples):
            began = time.perf_counter()
            load()
            times.append((time.perf_counter() - began) * 1000)
        p95 = percentile(times, 0.95)
        result[name] = round(p95, 2) if p95 is not None else None
    return result


def claims(engine: Engine, samples: int, batch: int = 100) -> dict[str, Any]:
    """A node's claim of ``batch`` due occurrences (journal rows inserted, slots taken, one
    transaction, as ``Node`` claims a minute's work) and their terminal commit with the log
    projection (``finish_many``, as the finish group commit writes it), ``samples`` times:
    statements per claim and per finish, milliseconds p50 / p95 of each."""
    repo = ExecutionRepository(engine, "big-claims", 60_000)
    counted = {"statements": 0}

    def count(*_: Any) -> None:
        counted["statements"] += 1

    claim_ms: list[float] = []
    finish_ms: list[float] = []
    statements = {"claim": 0, "finish": 0}
    run = uuid.uuid4().hex[:8]
    event.listen(engine, "before_cursor_execute", count)
    try:
        for sample in range(samples + 1):  # the first one warms up
            requests = [ClaimRequest(occurrence_id=f"bigclaim-{run}-{sample}-{i}", task_id=f"idle-{i:05d}",
                                     task_revision=1, trigger="cron", max_attempts=1, token=uuid.uuid4().hex,
                                     scheduled_minute=0) for i in range(batch)]
            counted["statements"] = 0
            began = time.perf_counter()
            results = repo.claim(requests)
            took_claim, claim_statements = (time.perf_counter() - began) * 1000, counted["statements"]
            if sum(r.outcome == "claimed" for r in results) != batch:
                raise RuntimeError(f"claim sample {sample}: {[r.outcome for r in results][:5]}...")
            now = db_now(engine)
            finishes = [FinishRequest(claimed_execution(r, "big-claims"), r.token, "success", None,
                                      (Attempt(str(uuid.uuid4()), 1, 1, "big-claims", now, now + 1, "success"),),
                                      True) for r in requests]
            counted["statements"] = 0
            began = time.perf_counter()
            done = repo.finish_many(finishes)
            took_finish, finish_statements = (time.perf_counter() - began) * 1000, counted["statements"]
            if len(done.committed) != batch:
                raise RuntimeError(f"finish sample {sample}: {len(done.committed)} of {batch} committed")
            if sample:
                claim_ms.append(took_claim)
                finish_ms.append(took_finish)
                statements["claim"] += claim_statements
                statements["finish"] += finish_statements
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return {"claim_statements": round(statements["claim"] / samples, 2),
            "claim_p50_ms": round(statistics.median(claim_ms), 2), "claim_p95_ms": percentile(claim_ms, 0.95),
            "finish_statements": round(statements["finish"] / samples, 2),
            "finish_p50_ms": round(statistics.median(finish_ms), 2), "finish_p95_ms": percentile(finish_ms, 0.95)}


def _log_delete_once(engine: Engine, cutoff_days: int, count: int) -> int:
    """The log retention's statement with one batch of ``count`` rows instead of PRUNE_BATCH:
    what the database allows when one transaction may hold them all (the ceiling retention is
    read against)."""
    def work(conn: Connection) -> int:
        condition = logs.c.started_at < db_now_ms() - cutoff_days * DAY_MS
        if dialect_kind(conn) == "mysql":
            statement = delete(logs).where(condition).with_dialect_options(mysql_limit=count)
        else:
            statement = delete(logs).where(logs.c.id.in_(select(logs.c.id).where(condition).limit(count)
                                                         .scalar_subquery()))
        return int(conn.execute(statement).rowcount)

    return write(engine, work)


def _rate(count: int, began: float) -> float:
    return count / max(1e-9, time.perf_counter() - began)


def retention(engine: Engine, rows: int) -> dict[str, Any]:
    """Age every row 40 days, then time log retention (30 days) and journal retention (30 days),
    each beside its ceiling on the same table: the same statement deleting ``CEILING_ROWS`` of the
    due rows in one transaction (no short locks), timed first."""
    write(engine, lambda conn: (
        conn.execute(update(executions).values(updated_at=executions.c.updated_at - 40 * DAY_MS)),
        conn.execute(update(logs).values(started_at=logs.c.started_at - 40 * DAY_MS))))
    sample = {"logs": min(CEILING_ROWS["logs"], rows // 10), "journal": min(CEILING_ROWS["journal"], rows // 10)}
    began = time.perf_counter()
    once = _log_delete_once(engine, 30, sample["logs"])
    log_ceiling = _rate(once, began)
    began = time.perf_counter()
    pruned_logs = LogRepository(engine).prune(None, 30)
    log_rate = _rate(pruned_logs, began)
    began = time.perf_counter()
    once_journal = JournalRetention(engine).prune(30, max_batches=1, batch_rows=sample["journal"]).journal
    journal_ceiling = _rate(once_journal, began)
    began = time.perf_counter()
    pruned = JournalRetention(engine).prune(30, max_batches=10**9)
    journal_rate = _rate(pruned.journal, began)
    left = scalar(engine, select(func.count()).select_from(executions))
    return {"log_prune_rows_per_s": round(log_rate), "log_ceiling_rows_per_s": round(log_ceiling),
            "log_prune_share": share(log_rate, log_ceiling),
            "journal_prune_rows_per_s": round(journal_rate), "journal_ceiling_rows_per_s": round(journal_ceiling),
            "journal_prune_share": share(journal_rate, journal_ceiling),
            "journal_left": left, "log_rows_pruned": pruned_logs, "journal_rows_pruned": pruned.journal,
            "ceiling_rows": {"logs": once, "journal": once_journal}}


def measure(target: Target, base: int, rows: int, tasks: int, ticks: int, samples: int, chunk: int,
            with_retention: bool) -> list[dict[str, Any]]:
    engine = prepare(target.url)
    try:
        now = db_now(engine)
        hour = (time.gmtime(now / 1000).tm_hour + 12) % 24  # nothing due during the run
        register_tasks(engine, (TaskDefinition(id=f"idle-{i:05d}", name=f"Idle {i}", cron=f"0 {hour} * * *")
                                for i in range(tasks)))
        results = []
        grown = 0
        for size in (base, rows):
            rate = grow(engine, grown, size, now, chunk)
            grown = size
            row = {"backend": target.label, "rows": size, "grow_rows_per_s": round(rate),
                   **idle_ticks(target.url, ticks), **pages(engine, samples), **claims(engine, samples)}
            results.append(row)
        if with_retention:
            results[-1].update(retention(engine, rows))
        return results
    finally:
        close_engine(engine)


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--base", type=int, default=10_000, help="rows of the first measurement (each table)")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the second measurement (each table)")
    parser.add_argument("--tasks", type=int, default=1_000, help="registered tasks (none due)")
    parser.add_argument("--ticks", type=int, default=30, help="idle ticks measured at each size")
    parser.add_argument("--samples", type=int, default=40, help="reads of each list page at each size")
    parser.add_argument("--chunk", type=int, default=100_000, help="rows one generating statement inserts")
    parser.add_argument("--retention", action="store_true", help="also time log and journal retention")
    args = parser.parse_args()
    if not 0 < args.base < args.rows:
        parser.error("--base must be positive and below --rows")
    per_target: list[dict[str, Any]] = []
    rows = run_on_targets(args, parser, "big", lambda target: {"sizes": measure(
        target, args.base, args.rows, args.tasks, args.ticks, args.samples, args.chunk, args.retention)})
    for row in rows:
        per_target.extend(row.get("sizes") or [row])
    title = (f"Big tables: journal and logs at {args.base:,} and {args.rows:,} rows each, {args.tasks:,} idle tasks; "
             f"list pages of 50 rows")
    finish(COLUMNS, per_target, title, args.json)


if __name__ == "__main__":
    main()
