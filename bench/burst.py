"""Burst firing: N hook tasks due in the same minute, K node processes on one database.

First it measures this host's ceiling on the same database (bench/limits.py: the one-transaction
claim + finish + log rate on one connection, ``--ceiling-s`` seconds per operation), then the
burst; the starts per second are also printed as a percentage of that ceiling, with the machine
and the commit. ``--profile DIR`` runs each node under cProfile (bench/PROFILE.md).

Prints a table: time from the minute boundary (DB clock) until every occurrence is terminal
and until every one has started, starts per second, fire lateness p50/p99/max, SQL
statements, transactions and all SQL commands per execution (counted with SQLAlchemy events
in every node, see bench/_burst_node.py), duplicates (must be 0), skipped and missed.

- lateness: an attempt's ``started_at`` (the node's DB-clock reading when it began the
  attempt) minus the boundary;
- starts per second: executions started / seconds from the boundary to the last start;
- duplicates: occurrences journaled twice for one task, taken over (sequence > 1), or whose
  handler was called more than once (the nodes report every call);
- missed: tasks without a journal row for the minute when the run ends (``--timeout-s``).

It is destructive for the scheduler tables of the database it is given (``--reset`` is
required for PostgreSQL / MySQL URLs); SQLite runs on a fresh temporary file when no URL is
given. The boundary is brought close with the test-only DB clock offset, as the tests do.
With ``--json`` the last line of output is one JSON object with the figures.

    .venv/bin/python bench/burst.py --tasks 10000 --nodes 2
    .venv/bin/python bench/burst.py --url postgresql://postgres@127.0.0.1:5432/bench --reset --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import limits
from _common import kind_of
from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine

from scheduler_core.db import close_engine, create_engine, db_now_ms, dialect_kind, upgrade
from scheduler_core.db.tables import executions, logs, nodes, scheduler_meta, slots, tasks
from scheduler_core.model import TaskDefinition
from scheduler_core.store import TaskRepository
from scheduler_core.store.transactions import write

NODE_SCRIPT = Path(__file__).with_name("_burst_node.py")
COLUMNS = [("backend", "database"), ("tasks", "tasks"), ("nodes", "nodes"),
           ("seconds_to_all_started", "all started after s"), ("seconds_to_terminal", "all terminal after s"),
           ("starts_per_s", "starts / s"), ("starts_share", "% of ceiling"),
           ("starts_share_of_batch", "% of batch rows / s"), ("lateness_p50_ms", "lateness p50 ms"),
           ("lateness_p99_ms", "p99 ms"), ("lateness_max_ms", "max ms"),
           ("statements_per_execution", "statements / execution"),
           ("transactions_per_execution", "transactions / execution"),
           ("sql_commands_per_execution", "all SQL commands / execution"),
           ("cpu_ms_per_execution", "node CPU ms / execution"),
           ("duplicates", "duplicates"), ("skipped", "skipped"), ("missed", "missed")]


def _reset(engine: Engine) -> None:
    def work(conn: Any) -> None:
        for table in (logs, executions, slots, tasks, nodes):
            conn.execute(delete(table))
        conn.execute(update(scheduler_meta).values(value=0))

    write(engine, work)


def _register(engine: Engine, count: int, minute: int, hour: int) -> None:
    repo = TaskRepository(engine)
    batch = 500
    for start in range(0, count, batch):
        chunk = [TaskDefinition(id=f"burst-{i:05d}", name=f"Burst {i}", cron=f"{minute} {hour} * * *")
                 for i in range(start, min(count, start + batch))]
        write(engine, lambda conn, c=chunk: [repo.insert(t, conn) for t in c])  # type: ignore[misc]


def _db_now(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(db_now_ms())).scalar_one())


def _percentile(values: list[int], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def run(url: str, count: int, node_count: int, lead_s: float, concurrency: int, max_queued: int,
        timeout_s: float, ceiling_s: float = 0, node_urls: tuple[str, ...] = ()) -> dict[str, Any]:
    """``node_urls``: node i connects with node_urls[i % len] (one per Galera node); () -> url."""
    ceiling = limits.measure(url, ceiling_s) if ceiling_s > 0 else None  # this host, minutes before the burst
    if ceiling is not None:
        print(limits.ceiling_line({"backend": kind_of(url), **ceiling}), file=sys.stderr, flush=True)
    engine = create_engine(url)
    try:
        upgrade(engine)
        _reset(engine)
        now = _db_now(engine)
        boundary = now - now % 60_000 + 10 * 60_000  # well after registration, however long it takes
        tm = time.gmtime(boundary / 1000)
        _register(engine, count, tm.tm_min, tm.tm_hour)
        offset = boundary - int(lead_s * 1000) - _db_now(engine)  # the nodes see the boundary in lead_s
        env = {**os.environ, "HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
        urls = node_urls or (url,)
        procs = [subprocess.Popen([sys.executable, str(NODE_SCRIPT), urls[i % len(urls)], f"bench-{i}",
                                   str(concurrency), str(max_queued)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for i in range(node_count)]
        try:
            _wait_all_terminal(engine, boundary, count, offset, lead_s + timeout_s)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
        stats = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            if proc.returncode != 0 or not out.strip():
                raise SystemExit(f"a node failed ({proc.returncode}): {err[-3000:]}")
            stats.append(json.loads(out.strip().splitlines()[-1]))
        result = _report(engine, boundary, count, stats, concurrency, max_queued)
        if ceiling is not None:
            result["ceiling"] = ceiling
            result["starts_share"] = limits.share(result["starts_per_s"], ceiling["one_tx_per_s"])
            result["starts_share_of_batch"] = limits.share(result["starts_per_s"], ceiling["batch_rows_per_s"])
        return result
    finally:
        close_engine(engine)


def _wait_all_terminal(engine: Engine, boundary: int, count: int, offset: int, limit_s: float) -> None:
    """Until every task's occurrence is journaled and terminal, or ``limit_s`` has passed."""
    query = select(func.count()).select_from(executions).where(
        executions.c.scheduled_minute == boundary, executions.c.status != "running")
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if int(conn.execute(query).scalar_one()) >= count:
                return
        time.sleep(0.25)  # the figures come from the journal's own timestamps, not from this poll


def _report(engine: Engine, boundary: int, count: int, stats: list[dict[str, Any]], concurrency: int,
            max_queued: int) -> dict[str, Any]:
    with engine.connect() as conn:
        rows = conn.execute(select(executions.c.task_id, executions.c.status, executions.c.sequence,
                                   executions.c.attempts, executions.c.updated_at)
                            .where(executions.c.scheduled_minute == boundary)).all()
    per_task = Counter(row.task_id for row in rows)
    starts = [int(attempt["started_at"]) - boundary for row in rows for attempt in (row.attempts or [])]
    calls = Counter(occurrence for s in stats for occurrence in s["calls"])
    duplicates = (sum(n - 1 for n in per_task.values()) + sum(1 for r in rows if r.sequence > 1)
                  + sum(n - 1 for n in calls.values()))
    executed = max(1, len(starts))
    terminal = [r for r in rows if r.status != "running"]
    last_start_s = max(starts) / 1000 if starts else None

    def per_execution(*names: str) -> float:
        return round(sum(s[name] for s in stats for name in names) / executed, 2)

    kind = dialect_kind(engine)
    sql_commands = per_execution("statements", "commits", "rollbacks")
    if kind != "sqlite":  # the driver's own BEGIN, and the pool's pre-ping at every check-out
        sql_commands = round(sql_commands + per_execution("begins", "checkouts"), 2)
    backend = "mariadb" if kind == "mysql" and getattr(engine.dialect, "is_mariadb", False) else kind
    return {
        "backend": backend, "tasks": count, "nodes": len(stats), "concurrency": concurrency, "max_queued": max_queued,
        "journaled": len(rows),
        "seconds_to_terminal": (round((max(r.updated_at for r in terminal) - boundary) / 1000, 2)
                                if len(terminal) == count and count else None),
        "seconds_to_all_started": round(last_start_s, 2) if last_start_s is not None else None,
        "starts_per_s": round(len(starts) / last_start_s, 1) if last_start_s else None,
        "lateness_p50_ms": _percentile(starts, 0.5), "lateness_p99_ms": _percentile(starts, 0.99),
        "lateness_max_ms": max(starts) if starts else None,
        "statements_per_execution": per_execution("statements"),
        "transactions_per_execution": per_execution("commits", "rollbacks"),
        "commits_per_execution": per_execution("commits"),
        "sql_commands_per_execution": sql_commands,
        "cpu_ms_per_execution": per_execution("cpu_ms"),
        "duplicates": duplicates, "skipped": sum(1 for r in rows if r.status == "skipped"),
        "missed": count - len(per_task), "not_terminal": len(rows) - len(terminal),
        "statuses": dict(sorted(Counter(r.status for r in rows).items())),
        "cpu_s_per_node": [round(s["cpu_ms"] / 1000, 1) for s in stats],
        "started_per_node": [s["started"] for s in stats],
        "first_tick_before_boundary_s": [None if s["first_tick_db_ms"] is None
                                         else round((boundary - s["first_tick_db_ms"]) / 1000, 1) for s in stats],
    }


def print_table(result: dict[str, Any]) -> None:
    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    print("| " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    print("| " + " | ".join(cell(result.get(key)) for key, _ in COLUMNS) + " |")
    details = {k: v for k, v in result.items() if k not in dict(COLUMNS)}
    print(f"\n{json.dumps(details)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="database URL (default: a fresh temporary SQLite file)")
    parser.add_argument("--reset", action="store_true", help="allow clearing the scheduler tables of --url")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--lead-s", type=float, default=None,
                        help="seconds between node start and the boundary (default: 8 + 1 per 1,000 tasks)")
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrency per node")
    parser.add_argument("--max-queued", type=int, default=5_000, help="max_queued per node")
    parser.add_argument("--timeout-s", type=float, default=600, help="give up waiting this long after the boundary")
    parser.add_argument("--ceiling-s", type=float, default=2.0,
                        help="first measure this host's ceiling (bench/limits.py), this many seconds per operation; "
                             "0 skips it")
    parser.add_argument("--profile", metavar="DIR",
                        help="run every node under cProfile and write its stats to DIR/<node>.prof (see PROFILE.md)")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON with the figures")
    args = parser.parse_args()
    facts = limits.machine()
    url = args.url
    if url is None:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='hai-burst-')}/burst.db"
    elif not url.startswith("sqlite") and not args.reset:
        parser.error("--reset is required: the benchmark clears the scheduler tables of --url")
    lead_s = args.lead_s if args.lead_s is not None else 8 + args.tasks / 1000
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        os.environ["HAI_BENCH_PROFILE_DIR"] = str(Path(args.profile).resolve())
    result = run(url, args.tasks, args.nodes, lead_s, args.concurrency, args.max_queued, args.timeout_s,
                 args.ceiling_s)
    result["machine"] = facts
    print_table(result)
    print(limits.machine_line(facts))
    if "ceiling" in result:
        print(limits.ceiling_line({"backend": result["backend"], **result["ceiling"]})
              + f"; this burst's starts / s are {result['starts_share']} % of the one-transaction ceiling and "
                f"{result['starts_share_of_batch']} % of the batch-claimed rows / s")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
