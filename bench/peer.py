"""The peer: the same burst with APScheduler 3, as a team gets it by running it in K workers.

K processes (default 2) each run a BackgroundScheduler on a SQLAlchemyJobStore in the SAME
database -- what happens when APScheduler is started in every gunicorn worker. N jobs
(default 10,000) have cron triggers due in the same minute; each run inserts (job id,
scheduled minute, pid, start time) into a table of its own (``peer_runs``). APScheduler's
defaults are kept (10 threads per process, ``misfire_grace_time`` 1 s), as a team would
leave them; ``--threads`` / ``--misfire-grace-s`` change them.

Reported as burst.py reports ours: duplicates (a job+minute run more than once), missed
(a job+minute never run), fire lateness p50 / p99 / max (first run's start minus the minute),
seconds until the last start, starts per second, SQL statements and transactions per run.

Clock: APScheduler reads the host clock, so the DB clock offset that brings our nodes near a
boundary cannot move it. The jobs are scheduled for the next real minute boundary that leaves
time to register them (about ``--register-ms`` per job) plus ``--lead-s``; the script waits for
it (up to a minute or so of real waiting). The databases run on this host, so the host clock
and the DB clock are the same clock.

The jobs are registered once, by this script, before the workers start (one worker having
called ``add_job(..., replace_existing=True)``); the workers only run them.

    .venv/bin/python bench/peer.py --tasks 10000 --nodes 2 --backend postgresql
    .venv/bin/python bench/peer.py --url postgresql://postgres@127.0.0.1:5432/mine --reset --json
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from _common import (
    MINUTE_MS,
    Target,
    add_common_args,
    base_parser,
    fetch,
    kill_all,
    print_table,
    report_failures,
    run_on_targets,
    scalar,
    spawn,
    spread,
    sql_per,
    stop_all,
    wait_until,
)
from _peer_node import JOB_TABLE, metadata, peer_runs
from sqlalchemy import func, select, text

from scheduler_core.db import close_engine, create_engine

COLUMNS = [("backend", "database"), ("scheduler", "scheduler"), ("tasks", "jobs"), ("nodes", "processes"),
           ("seconds_to_all_started", "last start s"), ("starts_per_s", "starts / s"),
           ("lateness_p50_ms", "lateness p50 ms"), ("lateness_p99_ms", "p99 ms"), ("lateness_max_ms", "max ms"),
           ("duplicates", "duplicates"), ("missed", "missed"), ("statements_per_execution", "statements / run")]
QUIET_S = 10.0  # no new run for this long after the boundary: the burst is over


def reset(engine: Any) -> None:
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {JOB_TABLE}"))
        conn.execute(text("DROP TABLE IF EXISTS peer_runs"))
    metadata.create_all(engine)


def register(engine: Any, count: int, boundary_ms: int, grace_s: int) -> None:
    """Add the jobs through APScheduler itself (a paused scheduler on the shared store).

    ``misfire_grace_time`` is stored with each job, so it is set here, where they are added."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-untyped]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

    tm = time.gmtime(boundary_ms / 1000)
    scheduler = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(engine=engine, tablename=JOB_TABLE)},
                                    timezone="UTC")
    scheduler.start(paused=True)
    try:
        for i in range(count):
            job_id = f"peer-{i:05d}"
            scheduler.add_job("_peer_node:record_run", "cron", minute=tm.tm_min, hour=tm.tm_hour, id=job_id,
                              args=[job_id, boundary_ms], misfire_grace_time=grace_s, replace_existing=True)
    finally:
        scheduler.shutdown(wait=False)


def measure(target: Target, count: int, node_count: int, lead_s: float, register_ms: float, threads: int,
            grace_s: int) -> dict[str, Any]:
    engine = create_engine({"url": target.url, "pool_size": 4})
    try:
        reset(engine)
        soon = time.time() + lead_s + count * register_ms / 1000
        boundary = int(soon * 1000) - int(soon * 1000) % MINUTE_MS + MINUTE_MS
        register(engine, count, boundary, grace_s)
        left = boundary / 1000 - time.time()
        if left < 2:
            raise SystemExit(f"registering {count} jobs ran {-left:.0f} s past the boundary; raise --register-ms")
        print(f"[peer] jobs due at {time.strftime('%H:%M:%S', time.gmtime(boundary / 1000))} UTC, "
              f"waiting {left:.0f} s", file=sys.stderr, flush=True)
        options = {"url": target.url, "threads": threads}
        procs = [spawn("_peer_node.py", [json.dumps(options)], f"peer-{i}") for i in range(node_count)]
        try:
            wait_until(_burst_over(engine, count, boundary), left + 3600, "the burst to end", procs, poll_s=1.0)
            stats = stop_all(procs)
        finally:
            kill_all(procs)
        return summarise(engine, target.label, count, boundary, stats)
    finally:
        close_engine(engine)


def _burst_over(engine: Any, count: int, boundary: int) -> Any:
    """Over when every job ran and nothing new came for QUIET_S, or nothing came for QUIET_S at all."""
    seen = {"runs": -1, "since": time.monotonic()}

    def check() -> bool:
        if time.time() * 1000 < boundary + QUIET_S * 1000:
            return False
        runs = scalar(engine, select(func.count()).select_from(peer_runs))
        if runs != seen["runs"]:
            seen["runs"], seen["since"] = runs, time.monotonic()
        return time.monotonic() - seen["since"] >= QUIET_S

    return check


def summarise(engine: Any, kind: str, count: int, boundary: int, stats: list[dict[str, Any]]) -> dict[str, Any]:
    runs = fetch(engine, select(peer_runs.c.job_id, peer_runs.c.scheduled_minute, peer_runs.c.pid,
                                peer_runs.c.started_at))
    first: dict[tuple[str, int], int] = {}
    for run in runs:
        key = (run.job_id, int(run.scheduled_minute))
        first[key] = min(first.get(key, run.started_at), int(run.started_at))
    lateness = [started - boundary for started in first.values()]
    late = spread(lateness)
    starts = sorted(int(r.started_at) for r in runs)
    span_s = (starts[-1] - starts[0]) / 1000 if len(starts) > 1 else None
    sql = sql_per(stats, len(runs), kind)
    return {
        "scheduler": "APScheduler 3", "tasks": count, "nodes": len(stats), "runs": len(runs),
        "seconds_to_terminal": round((starts[-1] - boundary) / 1000, 2) if starts else None,
        "seconds_to_all_started": round(max(lateness) / 1000, 2) if lateness else None,
        "starts_per_s": round(len(runs) / span_s, 1) if span_s else None,
        "lateness_p50_ms": late["p50"], "lateness_p99_ms": late["p99"], "lateness_max_ms": late["max"],
        "statements_per_execution": sql["statements"], "transactions_per_execution": sql["transactions"],
        "sql_commands_per_execution": sql["sql_commands"],
        "duplicates": len(runs) - len(first), "skipped": None, "missed": count - len(first),
        "reported_missed": sum(s.get("missed", 0) for s in stats), "errors": sum(s.get("errors", 0) for s in stats),
        "runs_per_process": [sum(1 for r in runs if r.pid == s["pid"]) for s in stats],
        "cpu_s_per_node": [round(s["cpu_ms"] / 1000, 1) for s in stats],
    }


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=10_000, help="jobs due in the same minute")
    parser.add_argument("--lead-s", type=float, default=15.0, help="at least this long between start and boundary")
    parser.add_argument("--register-ms", type=float, default=6.0, help="expected time to register one job")
    parser.add_argument("--threads", type=int, default=10, help="thread pool per process (APScheduler's default)")
    parser.add_argument("--misfire-grace-s", type=int, default=1,
                        help="misfire_grace_time of every job, whole seconds (APScheduler's default: 1)")
    args = parser.parse_args()
    rows = run_on_targets(args, parser, "peer", lambda target: measure(
        target, args.tasks, args.nodes, args.lead_s, args.register_ms, args.threads, args.misfire_grace_s))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        report_failures(rows)
        return
    print_table(COLUMNS, rows, f"APScheduler 3 burst: {args.tasks:,} jobs due in one minute, {args.nodes} processes "
                               "sharing one SQLAlchemyJobStore")

    report_failures(rows)


if __name__ == "__main__":
    main()
