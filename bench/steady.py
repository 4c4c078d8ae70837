"""Steady state: N tasks (default 1,000) firing every minute for M minutes (default 10) on K nodes (2).

Reports fire lateness p50 / p99 / max (first attempt's start minus the scheduled minute, DB
clock), the CPU each node used (all its threads, per minute and per execution), the database
server's CPU per execution (when it runs on this host: the whole server from the nodes' start
to their stop, their start-up, this script's polling and any other database's work included --
run it on a quiet server), SQL statements
per execution, and how much the journal and the logs grew per occurrence (bytes: PostgreSQL
``pg_total_relation_size``, MySQL ``data_length + index_length`` after ANALYZE, SQLite pages in
``dbstat``; indexes included, and dead row versions not yet vacuumed too -- that is real growth).

First it measures this host's ceiling on the same database (bench/limits.py, ``--ceiling-s``
seconds per operation; 0 skips it) and prints the run's executions per second as a percentage of
the one-transaction ceiling, with the machine and the commit. Then it measures the start floor
for the same task and node counts (bench/start_floor.py: the claim and begin writes alone, with
the product's store, all due at once; ``--floor-rounds`` rounds, the best kept; 0 skips it) and
prints the lateness p50 and p99 as multiples of the floor's: how close the nodes come to what
this host's database allows, a figure that travels where the milliseconds do not.

Honest timing: the test-only DB clock offset (``HAI_TEST_DB_CLOCK_OFFSET_MS``) is used once,
to put the nodes ``--lead-s`` seconds before a minute boundary; after that the clock runs at
its real pace, so a 10-minute run takes about 10 minutes. Each task's cron lists exactly the
M minutes of the run (``m-59,0-k * * * *``: every minute, but not the minute the nodes start in,
which would otherwise fire at once as a start-up burst).

    .venv/bin/python bench/steady.py --tasks 1000 --minutes 10 --backend postgresql
    .venv/bin/python bench/steady.py --tasks 200 --minutes 2          # quick, temporary SQLite
    .venv/bin/python bench/steady.py --tasks 200 --minutes 3 --nodes 3 --concurrency 6 --handler-ms 1000-4000
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

import limits
import start_floor
from _common import (
    MINUTE_MS,
    Target,
    add_common_args,
    base_parser,
    database_cpu_s,
    fetch,
    kill_all,
    next_boundary,
    offset_for,
    prepare,
    print_table,
    register_tasks,
    report_failures,
    run_on_targets,
    scalar,
    spawn,
    spread,
    sql_per,
    stop_all,
    table_bytes,
    wait_until,
)
from sqlalchemy import func, select

from scheduler_core.config import SchedulerConfig
from scheduler_core.db import close_engine
from scheduler_core.db.tables import executions, logs
from scheduler_core.model import TaskDefinition

COLUMNS = [("backend", "database"), ("tasks", "tasks"), ("minutes", "minutes"), ("occurrences", "occurrences"),
           ("missing", "missing"), ("duplicates", "duplicates"), ("skipped", "skipped"),
           ("lateness_p50_ms", "lateness p50 ms"), ("lateness_p99_ms", "p99 ms"), ("lateness_max_ms", "max ms"),
           ("floor_p50_ms", "start floor p50 ms"), ("floor_p99_ms", "floor p99 ms"),
           ("p50_over_floor", "p50 / floor"), ("p99_over_floor", "p99 / floor"),
           ("executions_per_s", "executions / s"), ("ceiling_share", "% of ceiling"),
           ("statements_per_execution", "statements / execution"),
           ("transactions_per_execution", "transactions / execution"),
           ("sql_commands_per_execution", "all SQL commands / execution"),
           ("cpu_s_per_minute", "CPU s / minute / node"),
           ("cpu_ms_per_execution", "CPU ms / execution"),
           ("db_cpu_ms_per_execution", "database CPU ms / execution"), ("bytes_per_occurrence", "bytes / occurrence"),
           ("min_node_share_pct", "least node share %"),
           ("burst_full_collections", "full GC in a minute's first 2 s (max ms)")]
GROWTH_TABLES = ("executions", "logs")


def minute_list(first_minute_ms: int, minutes: int) -> str:
    """The cron minute field naming exactly ``minutes`` consecutive minutes from ``first_minute_ms``."""
    start = first_minute_ms // MINUTE_MS % 60
    end = start + minutes - 1
    if end <= 59:
        return _span(start, end)
    return f"{_span(start, 59)},{_span(0, end - 60)}"


def _span(low: int, high: int) -> str:
    # Never "a-a": croniter reads a one-minute range as "*" (every minute).
    return str(low) if low == high else f"{low}-{high}"


def measure(target: Target, count: int, minutes: int, node_count: int, lead_s: float,
            concurrency: int, handler_ms: tuple[int, int] | None = None, ceiling_s: float = 0,
            floor_rounds: int = 0) -> dict[str, Any]:
    ceiling = limits.measure(target.url, ceiling_s) if ceiling_s > 0 else None  # same host, same database
    if ceiling is not None:
        print(limits.ceiling_line({"backend": target.label, **ceiling}), file=sys.stderr, flush=True)
    floor = start_floor.measure(target.url, count, node_count, repeat=floor_rounds) if floor_rounds else None
    if floor is not None:
        print(f"Start floor on {target.label}: {count:,} occurrences from {node_count} processes started "
              f"p50 {floor['floor_p50_ms']} ms, p99 {floor['floor_p99_ms']} ms (bench/start_floor.py, "
              f"best of {floor_rounds})", file=sys.stderr, flush=True)
    result = _measure(target, count, minutes, node_count, lead_s, concurrency, handler_ms)
    if ceiling is not None:
        result["ceiling"] = ceiling
        result["ceiling_share"] = limits.share(result["executions_per_s"], ceiling["one_tx_per_s"])
    if floor is not None:
        result.update(floor_p50_ms=floor["floor_p50_ms"], floor_p99_ms=floor["floor_p99_ms"],
                      floor_rounds_p50_ms=floor["rounds_p50_ms"],
                      p50_over_floor=_ratio(result["lateness_p50_ms"], floor["floor_p50_ms"]),
                      p99_over_floor=_ratio(result["lateness_p99_ms"], floor["floor_p99_ms"]))
    return result


def _ratio(value: float | None, floor: float | None) -> float | None:
    return round(value / floor, 2) if value is not None and floor else None


def _measure(target: Target, count: int, minutes: int, node_count: int, lead_s: float,
             concurrency: int, handler_ms: tuple[int, int] | None) -> dict[str, Any]:
    engine = prepare(target.url)
    try:
        first = next_boundary(engine, 0)  # the minute field only; the real first boundary comes below
        cron = f"{minute_list(first, minutes)} * * * *"
        register_tasks(engine, (TaskDefinition(id=f"steady-{i:05d}", name=f"Steady {i}", cron=cron)
                                for i in range(count)))
        # Cron minutes are absolute: the nodes must see the boundary that the list begins with.
        offset = offset_for(engine, first, lead_s)
        size_before = table_bytes(engine, GROWTH_TABLES)
        last = first + (minutes - 1) * MINUTE_MS
        env = {"HAI_TEST_DB_CLOCK_OFFSET_MS": str(offset)}
        options = {"url": target.url, "concurrency": concurrency, "tick_ms": 1000, "handler_ms": handler_ms}
        db_cpu_before = database_cpu_s(engine)
        procs = [spawn("_node.py", [json.dumps({**options, "node_id": f"steady-{i}", "url": target.node_url(i)})],
                       f"steady-{i}", env) for i in range(node_count)]
        try:
            wait_until(lambda: _terminal(engine, last) >= count, lead_s + minutes * 60 + 300,
                       "the last minute's occurrences", procs, poll_s=1.0)
            stats = stop_all(procs)
        finally:
            kill_all(procs)
        db_cpu_after = database_cpu_s(engine)
        growth = table_bytes(engine, GROWTH_TABLES) - size_before
        result = summarise(engine, target.label, first, last, count, minutes, stats, growth)
        if db_cpu_before is not None and db_cpu_after is not None:  # a server on this host
            executed = max(1, sum(s["started"] for s in stats))
            result["db_cpu_ms_per_execution"] = round((db_cpu_after - db_cpu_before) * 1000 / executed, 2)
        return result
    finally:
        close_engine(engine)


def _terminal(engine: Any, minute: int) -> int:
    query = select(func.count()).select_from(executions).where(executions.c.scheduled_minute == minute,
                                                               executions.c.status != "running")
    return scalar(engine, query)


def summarise(engine: Any, kind: str, first: int, last: int, count: int, minutes: int, stats: list[dict[str, Any]],
              growth: int) -> dict[str, Any]:
    rows = fetch(engine, select(executions.c.scheduled_minute, executions.c.status, executions.c.sequence,
                                executions.c.attempts, executions.c.owner_node))
    log_rows = scalar(engine, select(func.count()).select_from(logs))
    in_window = [r for r in rows if r.scheduled_minute is not None and first <= r.scheduled_minute <= last]
    lateness = [int(r.attempts[0]["started_at"]) - r.scheduled_minute for r in in_window if r.attempts]
    executed = max(1, len(lateness))
    late = spread(lateness)
    wall_min = max(s["wall_s"] for s in stats) / 60
    sql = sql_per(stats, executed, kind)
    return {
        "tasks": count, "minutes": minutes, "occurrences": len(rows), "log_rows": log_rows,
        "missing": count * minutes - len(in_window), "duplicates": sum(1 for r in in_window if r.sequence > 1),
        "skipped": sum(1 for r in in_window if r.status == "skipped"),
        "statuses": {s: sum(1 for r in rows if r.status == s) for s in sorted({r.status for r in rows})},
        "lateness_p50_ms": late["p50"], "lateness_p99_ms": late["p99"], "lateness_max_ms": late["max"],
        "executions_per_s": round(len(lateness) / (minutes * 60), 1),  # the load carried, over the run
        "statements_per_execution": sql["statements"], "transactions_per_execution": sql["transactions"],
        "sql_commands_per_execution": sql["sql_commands"],
        "cpu_s_per_minute": [round(s["cpu_ms"] / 1000 / wall_min, 2) for s in stats],
        "cpu_ms_per_execution": round(sum(s["cpu_ms"] for s in stats) / executed, 2),
        "bytes_per_occurrence": round(growth / max(1, len(rows))), "growth_bytes": growth,
        "started_per_node": [s["started"] for s in stats],
        "min_node_share_pct": _min_share(in_window, len(stats), first, last),
        "burst_full_collections": _burst_collections(stats),
    }


def _burst_collections(stats: list[dict[str, Any]]) -> str:
    """Python's full collections that began in the first 2 s of a minute, when a minute's work
    starts (every thread of that node stops meanwhile): how many, and the longest pause."""
    pauses = [ms for s in stats for ms, into_minute in s.get("full_collections", []) if into_minute < 2_000]
    return f"{len(pauses)} ({max(pauses):.0f})" if pauses else "0"


def _min_share(rows: list[Any], node_count: int, first: int, last: int) -> float:
    """The smallest share of a minute's occurrences one node ran, over every minute (percent)."""
    shares = []
    for minute in range(first, last + 1, MINUTE_MS):
        owners = Counter(r.owner_node for r in rows if r.scheduled_minute == minute and r.owner_node)
        total = sum(owners.values())
        if total:
            shares.append(min(owners.values()) / total * 100 if len(owners) == node_count else 0.0)
    return round(min(shares), 1) if shares else 0.0


def _range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    if not (low.isdigit() and high.isdigit() and 0 <= int(low) <= int(high) <= 600_000):
        raise argparse.ArgumentTypeError("LOW-HIGH in ms, e.g. 1000-4000")
    return int(low), int(high)


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=1_000)
    parser.add_argument("--minutes", type=int, default=10, choices=range(1, 60), metavar="1..59")
    parser.add_argument("--lead-s", type=float, default=15.0, help="seconds between node start and the first minute")
    parser.add_argument("--concurrency", type=int, default=SchedulerConfig().max_concurrency,
                        help="max_concurrency per node (default: the product's, %(default)s)")
    parser.add_argument("--handler-ms", type=_range, default=None, metavar="LOW-HIGH",
                        help="slow handlers: each task takes a fixed time in this range (e.g. 1000-4000)")
    parser.add_argument("--ceiling-s", type=float, default=2.0,
                        help="first measure this host's ceiling (bench/limits.py), this many seconds per operation; "
                             "0 skips it")
    parser.add_argument("--floor-rounds", type=int, default=3, choices=range(0, 21), metavar="0..20",
                        help="first measure the start floor for the same tasks and nodes (bench/start_floor.py), "
                             "best of this many rounds; 0 skips it")
    args = parser.parse_args()
    facts = limits.machine()
    rows = run_on_targets(args, parser, "steady", lambda target: measure(
        target, args.tasks, args.minutes, args.nodes, args.lead_s, args.concurrency, args.handler_ms,
        args.ceiling_s, args.floor_rounds))
    title = (f"Steady state: {args.tasks:,} tasks every minute for {args.minutes} minutes, "
             f"{args.nodes} nodes (lateness = first attempt start - scheduled minute, DB clock; "
             f"% of ceiling = executions / s over the run against bench/limits.py's one-transaction ceiling)")
    print_table(COLUMNS, rows, title)
    print(f"\n{limits.machine_line(facts)}")
    for row in rows:
        if "ceiling" in row:
            print(limits.ceiling_line({"backend": row["backend"], **row["ceiling"]}))
    if args.json:
        for row in rows:
            print(json.dumps({**row, "machine": facts}))
    report_failures(rows)


if __name__ == "__main__":
    main()
