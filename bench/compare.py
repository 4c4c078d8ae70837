"""Ours and the peer side by side: ``burst.py --json`` and ``peer.py --json`` with the same N
jobs, K processes and database, one after the other, in one table per database.

burst.py runs hai-scheduler's nodes (a hook task per job, journal, leases); peer.py runs
APScheduler 3 BackgroundSchedulers sharing one SQLAlchemyJobStore. See each script's --help
for how it reaches its minute boundary (ours: the test DB clock offset; the peer: the next
real minute boundary, waited for). Both systems' starts per second are also shown as a share of
the one-transaction ceiling that burst.py measures on the same database first (bench/limits.py).

    .venv/bin/python bench/compare.py --tasks 10000 --nodes 2 --backend postgresql
    .venv/bin/python bench/compare.py --tasks 1000 --backend sqlite --backend postgresql --backend mysql
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import limits
from _common import (
    BENCH_DIR,
    PYTHON,
    Target,
    add_common_args,
    base_parser,
    kind_of,
    print_table,
    report_failures,
    run_on_targets,
)

METRICS = [
    ("tasks", "jobs due in the minute"), ("nodes", "processes"),
    ("seconds_to_all_started", "last start after the boundary (s)"),
    ("seconds_to_terminal", "all terminal after the boundary (s)"), ("starts_per_s", "starts per second"),
    ("starts_share", "starts per second, % of the one-tx ceiling"),
    ("lateness_p50_ms", "fire lateness p50 (ms)"), ("lateness_p99_ms", "fire lateness p99 (ms)"),
    ("lateness_max_ms", "fire lateness max (ms)"), ("statements_per_execution", "SQL statements per execution"),
    ("transactions_per_execution", "transactions per execution"),
    ("sql_commands_per_execution", "all SQL commands per execution"),
    ("duplicates", "duplicates (job+minute run twice)"),
    ("missed", "missed (job+minute never run)"), ("skipped", "skipped, journaled with a reason"),
]


def run_script(script: str, argv: list[str]) -> dict[str, Any]:
    """Run a benchmark script (progress to our stderr) and return the JSON object it printed last."""
    done = subprocess.run([PYTHON, str(BENCH_DIR / script), *argv], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{script} failed with exit code {done.returncode}")
    return figures(done.stdout)


def figures(stdout: str) -> dict[str, Any]:
    """The JSON object on the last line of a script's output."""
    lines = stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"no JSON object on the last line of:\n{stdout[-2000:]}")
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def compare(target: Target, tasks: int, nodes: int, grace_s: int) -> dict[str, Any]:
    common = ["--tasks", str(tasks), "--nodes", str(nodes), "--url", target.url]
    if kind_of(target.url) != "sqlite":
        common.append("--reset")
    ours = run_script("burst.py", ["--json", *common])
    peer = run_script("peer.py", ["--json", "--misfire-grace-s", str(grace_s), *common])
    # burst.py measured the host's ceiling on this database first: the peer is read against it too
    peer["starts_share"] = limits.share(peer.get("starts_per_s"), (ours.get("ceiling") or {}).get("one_tx_per_s"))
    return {"ours": ours, "peer": peer}


def main() -> None:
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--misfire-grace-s", type=int, default=1,
                        help="the peer's misfire_grace_time (APScheduler's default: 1 s; late runs are dropped)")
    args = parser.parse_args()
    results = run_on_targets(args, parser, "compare", lambda target: compare(target, args.tasks, args.nodes,
                                                                                   args.misfire_grace_s))
    for result in results:
        if result.get("error"):
            continue
        rows = [{"metric": label, "ours": result["ours"].get(key), "peer": result["peer"].get(key)}
                for key, label in METRICS]
        print_table([("metric", "metric"), ("ours", "hai-scheduler"), ("peer", "APScheduler 3 (shared job store)")],
                    rows, f"Burst side by side on {result['backend']}: {args.tasks:,} jobs, {args.nodes} processes, "
                          f"peer misfire_grace_time {args.misfire_grace_s} s")
        print(f"\nThe peer's lateness covers the runs that happened: APScheduler drops a run that is later than "
              f"misfire_grace_time ({args.misfire_grace_s} s), and those count as missed.")
        if args.json:
            print(json.dumps(result))
    sys.stdout.flush()
    report_failures(results)


if __name__ == "__main__":
    main()
