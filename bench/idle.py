"""Idle cost: N registered tasks (default 10,000), none due, K node processes (default 2).

What a node costs when there is nothing to do: SQL statements and transactions per tick and
CPU milliseconds per tick, per node. Each node counts its own statements (SQLAlchemy
``before_cursor_execute``) and CPU time (``time.process_time``, all its threads) over whole
ticks after a warm-up (start-up, which loads every definition once, is left out). The
heartbeat (every 10 s) and the lease keeper are included, averaged over the ticks. Counted
as burst.py counts: statements (every cursor statement; SQLite's BEGIN among them),
transactions (commits + rollbacks) and all SQL commands sent (on a server also the driver's
BEGIN and the pool's pre-ping per connection check-out).

Every task fires once a day, at an hour 12 hours away from the database's current time, so
nothing is due during the run. Prints one Markdown table row per database.

    .venv/bin/python bench/idle.py                                   # temporary SQLite file
    .venv/bin/python bench/idle.py --backend sqlite --backend postgresql --backend mysql
    .venv/bin/python bench/idle.py --url postgresql://postgres@127.0.0.1:5432/mine --reset
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from _common import (
    Target,
    add_common_args,
    base_parser,
    db_now,
    finish,
    kill_all,
    prepare,
    register_tasks,
    run_on_targets,
    scalar,
    spawn,
    sql_per,
    stop_all,
    wait_until,
)
from sqlalchemy import func, select

from scheduler_core.db import close_engine
from scheduler_core.db.tables import nodes
from scheduler_core.model import TaskDefinition

COLUMNS = [("backend", "database"), ("tasks", "tasks"), ("nodes", "nodes"), ("ticks", "ticks measured / node"),
           ("statements_per_tick", "statements / tick"), ("transactions_per_tick", "transactions / tick"),
           ("sql_commands_per_tick", "all SQL commands / tick"),
           ("cpu_ms_per_tick", "CPU ms / tick / node"), ("mix", "statements by verb (all nodes)")]


def idle_tasks(count: int, hour: int) -> list[TaskDefinition]:
    return [TaskDefinition(id=f"idle-{i:05d}", name=f"Idle {i}", cron=f"{i % 60} {hour} * * *")
            for i in range(count)]


def measure(target: Target, count: int, node_count: int, seconds: float, tick_ms: int,
            warmup_ticks: int) -> dict[str, Any]:
    engine = prepare(target.url)
    try:
        far_hour = (time.gmtime(db_now(engine) / 1000).tm_hour + 12) % 24
        register_tasks(engine, idle_tasks(count, far_hour))
        options = {"url": target.url, "tick_ms": tick_ms, "warmup_ticks": warmup_ticks}
        procs = [spawn("_node.py", [json.dumps({**options, "node_id": f"idle-{i}"})], f"idle-{i}")
                 for i in range(node_count)]
        try:
            wait_until(lambda: _live_nodes(engine) >= node_count, 120, "the nodes' first tick", procs)
            time.sleep(warmup_ticks * tick_ms / 1000 + seconds)
            stats = stop_all(procs)
        finally:
            kill_all(procs)
    finally:
        close_engine(engine)
    return summarise(target.label, count, stats)


def _live_nodes(engine: Any) -> int:
    return scalar(engine, select(func.count()).select_from(nodes).where(nodes.c.stopped_at.is_(None)))


def summarise(kind: str, count: int, stats: list[dict[str, Any]]) -> dict[str, Any]:
    per_node = [sql_per([s], s["ticks"], kind) for s in stats]
    mix: Counter[str] = Counter()
    for s in stats:
        mix.update(s["verbs"])
    return {"tasks": count, "nodes": len(stats), "ticks": [s["ticks"] for s in stats],
            "statements_per_tick": [p["statements"] for p in per_node],
            "transactions_per_tick": [p["transactions"] for p in per_node],
            "sql_commands_per_tick": [p["sql_commands"] for p in per_node],
            "cpu_ms_per_tick": [round(s["cpu_ms"] / max(1, s["ticks"]), 2) for s in stats],
            "mix": " ".join(f"{verb}:{n}" for verb, n in sorted(mix.items()))}


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60, help="measured idle time after the warm-up")
    parser.add_argument("--tick-ms", type=int, default=1000, help="tick_interval_ms of the nodes")
    parser.add_argument("--warmup-ticks", type=int, default=3, help="ticks left out at the start")
    args = parser.parse_args()
    rows = run_on_targets(args, parser, "idle", lambda target: measure(
        target, args.tasks, args.nodes, args.seconds, args.tick_ms, args.warmup_ticks))
    title = (f"Idle cost: {args.tasks:,} tasks, none due, {args.nodes} nodes, "
             f"tick {args.tick_ms} ms, {args.seconds:.0f} s measured (figures per node)")
    finish(COLUMNS, rows, title, args.json)


if __name__ == "__main__":
    main()
