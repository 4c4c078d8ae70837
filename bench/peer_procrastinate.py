"""A second peer: procrastinate's periodic tasks beside hai-scheduler, the same burst, PostgreSQL.

procrastinate (the PostgreSQL task queue) defers a periodic task through a UNIQUE constraint per
(task, periodic id, period) -- the best Python anchor for "runs once per period". Both get the
same job: N tasks (default 10,000) due in the same minute, 2 worker processes, concurrency 8
each, handlers that only record the call. One run each, one after the other, on fresh
databases of the same PostgreSQL server; printed side by side:

- duplicates (a task's period started more than once) and missed (never started before the
  timeout), from the handlers' own records;
- time from the minute to the last start, starts per second, lateness p50 / p99 (a start minus
  its scheduled minute);
- SQL statements per run (hai-scheduler: SQLAlchemy ``before_cursor_execute`` in each node;
  procrastinate: psycopg ``AsyncCursor.execute`` calls in each worker) and node / worker CPU ms per run.

Differences to keep in mind when reading it: hai-scheduler's run is placed with the test-only DB
clock offset (bench/burst.py), procrastinate's waits for a real minute (it reads the host clock);
procrastinate's periodic deferrer defers each task from every worker (the unique constraint keeps
one) and then workers fetch jobs from the queue; hai-scheduler claims occurrences in batches.
The figures are this host's, taken minutes apart: on a shared machine they move with its load.

Both systems' starts per second are also shown as a share of this host's one-transaction ceiling
(bench/limits.py on a fresh PostgreSQL database of the same server, measured first, ``--ceiling-s``
seconds per operation; 0 skips it).

Needs the bench extra: ``.venv/bin/pip install -e '.[bench]'`` (procrastinate).

    .venv/bin/python bench/peer_procrastinate.py --tasks 10000
    .venv/bin/python bench/peer_procrastinate.py --tasks 1000 --skip-ours
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import burst
import limits
from _common import BENCH_DIR, PYTHON, base_parser, create_database, percentile, print_table

COLUMNS = [("system", "system"), ("tasks", "tasks"), ("workers", "workers / nodes"), ("duplicates", "duplicates"),
           ("missed", "missed"), ("seconds_to_all_started", "all started after s"), ("starts_per_s", "starts / s"),
           ("ceiling_share", "% of one-tx ceiling"),
           ("lateness_p50_ms", "lateness p50 ms"), ("lateness_p99_ms", "p99 ms"),
           ("statements_per_run", "statements / run"), ("cpu_ms_per_run", "CPU ms / run")]


def _procrastinate_schema(dsn: str) -> None:
    import procrastinate  # the bench extra: imported only when this peer runs
    import psycopg

    schema = (Path(procrastinate.__file__).parent / "sql" / "schema.sql").read_text()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(schema)  # type: ignore[call-overload]


def _succeeded(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'").fetchone()
    return int(row[0]) if row else 0


def run_procrastinate(count: int, workers: int, concurrency: int, lead_s: float, timeout_s: float) -> dict[str, Any]:
    target = create_database("postgresql", f"hai_bench_procr_{int(time.time())}")
    try:
        dsn = target.url
        _procrastinate_schema(dsn)
        now = time.time()
        boundary = int((now + lead_s) // 60 + 1) * 60  # the first whole minute at least lead_s away
        tm = time.gmtime(boundary)
        procs = [subprocess.Popen([PYTHON, str(BENCH_DIR / "_procrastinate_worker.py"), dsn, str(count),
                                   str(tm.tm_min), str(tm.tm_hour), f"procr-{i}", str(concurrency)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(workers)]
        try:
            deadline = boundary + timeout_s
            while time.time() < deadline and _succeeded(dsn) < count:
                time.sleep(0.5)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
        stats = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if not out.strip():
                raise RuntimeError(f"a procrastinate worker failed ({proc.returncode}): {err[-2000:]}")
            stats.append(json.loads(out.strip().splitlines()[-1]))
        return _summary("procrastinate", count, boundary, stats)
    finally:
        if target.cleanup is not None:
            target.cleanup()


def _summary(system: str, count: int, boundary: int, stats: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [call for s in stats for call in s["calls"] if call[1] == boundary]
    per_task = Counter(call[0] for call in calls)
    lateness = [(call[2] - boundary) * 1000 for call in calls]
    last = max(lateness) / 1000 if lateness else None
    runs = max(1, len(calls))
    return {"system": system, "tasks": count, "workers": len(stats),
            "duplicates": sum(n - 1 for n in per_task.values()), "missed": count - len(per_task),
            "seconds_to_all_started": round(last, 2) if last is not None else None,
            "starts_per_s": round(len(calls) / last, 1) if last else None,
            "lateness_p50_ms": _round(percentile(lateness, 0.5)), "lateness_p99_ms": _round(percentile(lateness, 0.99)),
            "statements_per_run": round(sum(s["statements"] for s in stats) / runs, 2),
            "cpu_ms_per_run": round(sum(s["cpu_ms"] for s in stats) / runs, 2)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value)


def _ceiling(seconds: float) -> dict[str, Any]:
    """bench/limits.py's ceiling on a fresh PostgreSQL database of this server (dropped after)."""
    target = create_database("postgresql", f"hai_bench_peer2_ceiling_{int(time.time())}")
    try:
        return limits.measure(target.url, seconds)
    finally:
        if target.cleanup is not None:
            target.cleanup()


def run_ours(count: int, nodes: int, concurrency: int, timeout_s: float) -> dict[str, Any]:
    target = create_database("postgresql", f"hai_bench_peer2_{int(time.time())}")
    try:
        result = burst.run(target.url, count, nodes, 8 + count / 1000, concurrency, 5_000, timeout_s)
    finally:
        if target.cleanup is not None:
            target.cleanup()
    return {"system": "hai-scheduler", "tasks": count, "workers": nodes, "duplicates": result["duplicates"],
            "missed": result["missed"], "seconds_to_all_started": result["seconds_to_all_started"],
            "starts_per_s": result["starts_per_s"], "lateness_p50_ms": result["lateness_p50_ms"],
            "lateness_p99_ms": result["lateness_p99_ms"], "statements_per_run": result["statements_per_execution"],
            "cpu_ms_per_run": result["cpu_ms_per_execution"]}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes / nodes of each system")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs at once per worker / node")
    parser.add_argument("--lead-s", type=float, default=None,
                        help="procrastinate: least seconds between worker start and the minute (default 15 + 2 "
                             "per 1,000 tasks: the workers register every periodic task first)")
    parser.add_argument("--timeout-s", type=float, default=600, help="give up this long after the minute")
    parser.add_argument("--skip-ours", action="store_true", help="run procrastinate only")
    parser.add_argument("--ceiling-s", type=float, default=2.0,
                        help="first measure this host's ceiling on a fresh PostgreSQL database (bench/limits.py), "
                             "this many seconds per operation; 0 skips it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        parser.error("procrastinate is not installed: .venv/bin/pip install -e '.[bench]'")
    facts = limits.machine()
    ceiling = _ceiling(args.ceiling_s) if args.ceiling_s > 0 else None
    lead_s = args.lead_s if args.lead_s is not None else 15 + 2 * args.tasks / 1000
    rows = [] if args.skip_ours else [run_ours(args.tasks, args.workers, args.concurrency, args.timeout_s)]
    rows.append(run_procrastinate(args.tasks, args.workers, args.concurrency, lead_s, args.timeout_s))
    for row in rows:
        row["ceiling_share"] = limits.share(row.get("starts_per_s"), ceiling["one_tx_per_s"]) if ceiling else None
    print_table(COLUMNS, rows, f"{args.tasks:,} periodic tasks due in one minute, {args.workers} workers / nodes, "
                               f"concurrency {args.concurrency}, PostgreSQL")
    print(f"\n{limits.machine_line(facts)}")
    if ceiling:
        print(limits.ceiling_line({"backend": "postgresql", **ceiling}))
    if args.json:
        for row in rows:
            print(json.dumps({**row, "machine": facts}))
    sys.exit(0)


if __name__ == "__main__":
    main()
