"""Summarise the node profiles of ``burst.py --profile DIR``: where a node's Python time goes.

cProfile sees every thread of a node (``_burst_node.py`` gives each thread its own profiler and
merges them), so its times are wall times per thread: a thread blocked on a lock, a queue, the
socket or the GIL is charged too. This script therefore prints two views:

- **busy time by library**: self time of every function except the ones that only block
  (lock acquire, queue get, the driver's socket wait and send, epoll, sleep), grouped by where
  the code lives (psycopg, SQLAlchemy, json, each scheduler_core module, the standard library);
- **product functions by cumulative time** (scheduler_core), blocking included: the call paths
  the time flows through.

Both per execution when ``--executions N`` is given (the burst's task count).

    .venv/bin/python bench/burst.py --url postgresql://... --reset --tasks 2000 --profile /tmp/prof
    .venv/bin/python bench/profile_summary.py /tmp/prof/*.prof --executions 2000
"""

from __future__ import annotations

import argparse
import collections
import pstats

BLOCKING = ("acquire' of '_thread.lock", "psycopg/connection.py", "(wait)", "SimpleQueue", "epoll",
            "_execute_send", "_exec_command", "posix.urandom", "sleep", "pymysql/connections.py:7",
            "recv_into", "sendall")


def group_of(filename: str) -> str:
    if "site-packages/sqlalchemy" in filename:
        return "sqlalchemy"
    for driver in ("psycopg", "pymysql"):
        if f"site-packages/{driver}" in filename:
            return driver
    if "scheduler_core/" in filename:
        return "scheduler_core/" + filename.split("scheduler_core/", 1)[1]
    if "/json/" in filename:
        return "json"
    return "builtins" if filename == "~" else "stdlib:" + filename.rsplit("/", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profiles", nargs="+", help=".prof files written by burst.py --profile")
    parser.add_argument("--executions", type=int, default=0, help="executions the profiles cover (per-execution "
                                                                   "figures)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    stats = pstats.Stats(args.profiles[0])
    for path in args.profiles[1:]:
        stats.add(path)
    busy: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    product = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        key = f"{filename}:{line}({name})"
        if "scheduler_core/" in filename:
            product.append((cumtime, ncalls, key.split("scheduler_core/", 1)[1]))
        if any(marker in key for marker in BLOCKING):
            continue
        busy[group_of(filename)] += tottime
        calls[group_of(filename)] += ncalls
    total = sum(busy.values())
    per = args.executions or 0
    print(f"busy time (blocking excluded): {total:.2f} s, {sum(calls.values()):,} calls"
          + (f"; {1000 * total / per:.2f} ms and {sum(calls.values()) / per:.0f} calls per execution" if per else ""))
    print("\n| where | busy s | share | calls" + (" | calls / execution |" if per else " |"))
    print("|---|---:|---:|---:|" + ("---:|" if per else ""))
    for group, seconds in busy.most_common(args.top):
        row = f"| {group} | {seconds:.3f} | {100 * seconds / total:.1f} % | {calls[group]:,} |"
        print(row + (f" {calls[group] / per:.1f} |" if per else ""))
    print("\n| product function (cumulative, blocking included) | s | calls |\n|---|---:|---:|")
    for cumtime, ncalls, key in sorted(product, reverse=True)[: args.top]:
        print(f"| `{key}` | {cumtime:.2f} | {ncalls:,} |")


if __name__ == "__main__":
    main()
