"""Burst firing: N hook tasks due in the same minute, K node processes on one database.

Prints one table row: time from the minute boundary (DB clock) until every occurrence is
terminal, starts per second, fire lateness p50/p99/max, SQL statements and transactions per
execution (counted with SQLAlchemy events in every node), duplicates (must be 0), skipped.

It is destructive for the scheduler tables of the database it is given (``--reset`` is
required for PostgreSQL / MySQL URLs); SQLite runs on a fresh temporary file when no URL is
given. The boundary is brought close with the test-only DB clock offset, as the tests do.

    .venv/bin/python bench/burst.py --tasks 10000 --nodes 2
    .venv/bin/python bench/burst.py --url postgresql://postgres@127.0.0.1:5432/bench --reset
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
from pathlib import Path

from sqlalchemy import delete, func, select, update

from scheduler_core.db import close_engine, create_engine, db_now_ms, upgrade
from scheduler_core.db.tables import executions, logs, nodes, scheduler_meta, slots, tasks
from scheduler_core.model import TaskDefinition
from scheduler_core.store import TaskRepository
from scheduler_core.store.dialect import write

NODE_SCRIPT = Path(__file__).with_name("_burst_node.py")


def _reset(engine: object) -> None:
    def work(conn: object) -> None:
        for table in (logs, executions, slots, tasks, nodes):
            conn.execute(delete(table))  # type: ignore[attr-defined]
        conn.execute(update(scheduler_meta).values(value=0))  # type: ignore[attr-defined]

    write(engine, work)  # type: ignore[arg-type]


def _register(engine: object, count: int, minute: int, hour: int) -> None:
    repo = TaskRepository(engine)  # type: ignore[arg-type]
    batch = 500
    for start in range(0, count, batch):
        chunk = [TaskDefinition(id=f"burst-{i:05d}", name=f"Burst {i}", cron=f"{minute} {hour} * * *")
                 for i in range(start, min(count, start + batch))]
        write(engine, lambda conn, c=chunk: [repo.insert(t, conn) for t in c])  # type: ignore[arg-type]


def _db_now(engine: object) -> int:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(select(db_now_ms())).scalar_one())


def _percentile(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def run(url: str, count: int, node_count: int, lead_s: float, concurrency: int) -> dict[str, object]:
    engine = create_engine(url)
    try:
        upgrade(engine)
        _reset(engine)
        registered_at = time.monotonic()
        now = _db_now(engine)
        boundary = now - now % 60_000 + 10 * 60_000  # well after registration, however long it takes
        tm = time.gmtime(boundary / 1000)
        _register(engine, count, tm.tm_min, tm.tm_hour)
        register_s = time.monotonic() - registered_at
        offset = boundary - int(lead_s * 1000) - _db_now(engine)  # the nodes see the boundary in lead_s
        env = {**os.environ, "HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
        procs = [subprocess.Popen([sys.executable, str(NODE_SCRIPT), url, f"bench-{i}", str(concurrency)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for i in range(node_count)]
        done_db_ms = _wait_all_terminal(engine, boundary, count, offset)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        stats = [json.loads(proc.communicate(timeout=300)[0].strip().splitlines()[-1]) for proc in procs]
        return _report(engine, boundary, count, done_db_ms, stats, register_s)
    finally:
        close_engine(engine)


def _wait_all_terminal(engine: object, boundary: int, count: int, offset: int) -> int:
    query = select(func.count()).select_from(executions).where(
        executions.c.scheduled_minute == boundary, executions.c.status != "running")
    while True:
        with engine.connect() as conn:  # type: ignore[attr-defined]
            done = int(conn.execute(query).scalar_one())
            now = int(conn.execute(select(db_now_ms())).scalar_one()) + offset
        if done >= count:
            return now
        time.sleep(0.05)


def _report(engine: object, boundary: int, count: int, done_db_ms: int, stats: list[dict[str, int]],
            register_s: float) -> dict[str, object]:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(select(executions.c.task_id, executions.c.status, executions.c.sequence,
                                   executions.c.attempts).where(executions.c.scheduled_minute == boundary)).all()
    per_task: dict[str, int] = {}
    starts: list[int] = []
    for row in rows:
        per_task[row.task_id] = per_task.get(row.task_id, 0) + 1
        for attempt in row.attempts or []:
            starts.append(int(attempt["started_at"]) - boundary)
    duplicates = sum(n - 1 for n in per_task.values()) + sum(1 for r in rows if r.sequence > 1)
    statements = sum(s["statements"] for s in stats)
    commits = sum(s["commits"] for s in stats)
    executed = max(1, len(starts))
    span_s = max(1e-9, (max(starts) - min(starts)) / 1000) if starts else float("nan")
    return {
        "tasks": count, "nodes": len(stats), "journaled": len(rows), "register_s": round(register_s, 1),
        "all_terminal_after_s": round((done_db_ms - boundary) / 1000, 2),
        "last_start_after_s": round(max(starts) / 1000, 2) if starts else None,
        "starts_per_s": round(len(starts) / span_s, 1) if starts else None,
        "lateness_p50_ms": _percentile(starts, 0.5), "lateness_p99_ms": _percentile(starts, 0.99),
        "lateness_max_ms": max(starts) if starts else None,
        "statements_per_execution": round(statements / executed, 2),
        "transactions_per_execution": round(commits / executed, 2),
        "duplicates": duplicates, "skipped": sum(1 for r in rows if r.status == "skipped"),
        "statuses": dict(sorted({r.status: sum(1 for x in rows if x.status == r.status) for r in rows}.items())),
        "cpu_s_per_node": [round(s["cpu_ms"] / 1000, 1) for s in stats],
        "started_per_node": [s["started"] for s in stats],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="database URL (default: a fresh temporary SQLite file)")
    parser.add_argument("--reset", action="store_true", help="allow clearing the scheduler tables of --url")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--lead-s", type=float, default=8.0, help="seconds between node start and the boundary")
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrency per node")
    args = parser.parse_args()
    url = args.url
    if url is None:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='hai-burst-')}/burst.db"
    elif not url.startswith("sqlite") and not args.reset:
        parser.error("--reset is required: the benchmark clears the scheduler tables of --url")
    result = run(url, args.tasks, args.nodes, args.lead_s, args.concurrency)
    print(json.dumps({"url": url.split("@")[-1], **result}, indent=2))


if __name__ == "__main__":
    main()
