"""MariaDB Galera Cluster beside one MariaDB server on the same host, in the same run (issue #33).

A cluster certifies every write set on every node before a COMMIT returns; this says what that
costs the scheduler. It starts, from Debian's packages (tests/galera/cluster.py), one plain
server and a 3-node cluster with the same settings, and runs on each topology:

- a burst: ``--tasks`` hook tasks due in one minute, three scheduler nodes (bench/burst.py);
- a steady load: ``--steady-tasks`` tasks every minute for ``--minutes`` minutes, three nodes
  (bench/steady.py);

on four topologies: ``one server``; ``galera, a node each`` (scheduler node i writes through
Galera node i: multi-primary, where certification conflicts happen); ``galera, one node`` (all
three through Galera node 1, as a proxy with one active backend does: conflicts become row locks);
``galera, a node each, sync_wait 0`` (the product's causal reads turned off, bench only: what they
cost). Certification is read from each Galera node's status before and after: local commits,
certification failures and brute-force aborts, and their share of the commits tried.

    .venv/bin/python bench/galera.py                       # about 12 minutes
    .venv/bin/python bench/galera.py --tasks 500 --steady-tasks 100 --minutes 1 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import burst
import limits
import steady
from _common import Target, base_parser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.galera.cluster import GaleraCluster, unavailable_reason

SYNC_WAIT_ENV = "HAI_BENCH_GALERA_SYNC_WAIT"
# Nodes started together on Galera: all but the first watch the others' heartbeats for up to a
# heartbeat interval before they start (runtime/clock_skew.py); the boundary comes after that.
LEAD_S = 25.0
NODES = 3
COUNTERS = ("local_commits", "local_cert_failures", "local_bf_aborts")


def _counters(cluster: GaleraCluster) -> dict[str, int]:
    totals = dict.fromkeys(COUNTERS, 0)
    for index in range(cluster.size):
        status = cluster.status(index)
        for key in COUNTERS:
            totals[key] += int(status.get(f"wsrep_{key}", 0) or 0)
    return totals


def _certification(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    delta = {key: after[key] - before[key] for key in COUNTERS}
    aborted = delta["local_cert_failures"] + delta["local_bf_aborts"]
    tried = delta["local_commits"] + aborted
    return {**delta, "aborted_share_pct": round(100 * aborted / tried, 2) if tried else None}


def _run(name: str, urls: tuple[str, ...], cluster: GaleraCluster | None, args: argparse.Namespace,
         sync_wait: int | None = None) -> dict[str, Any]:
    if sync_wait is None:
        os.environ.pop(SYNC_WAIT_ENV, None)
    else:
        os.environ[SYNC_WAIT_ENV] = str(sync_wait)
    try:
        print(f"== {name}: burst of {args.tasks}", file=sys.stderr, flush=True)
        before = _counters(cluster) if cluster else None
        bursted = burst.run(urls[0], args.tasks, NODES, LEAD_S + args.tasks / 1000, args.concurrency, 5_000, 600,
                            node_urls=urls)
        if cluster and before:
            bursted["certification"] = _certification(before, _counters(cluster))
        print(f"== {name}: {args.steady_tasks} tasks a minute for {args.minutes} minutes", file=sys.stderr,
              flush=True)
        before = _counters(cluster) if cluster else None
        steadied = steady.measure(Target("mariadb", urls[0], node_urls=urls), args.steady_tasks, args.minutes,
                                  NODES, LEAD_S, args.concurrency)
        if cluster and before:
            steadied["certification"] = _certification(before, _counters(cluster))
    finally:
        os.environ.pop(SYNC_WAIT_ENV, None)
    return {"topology": name, "burst": bursted, "steady": steadied}


def _row(result: dict[str, Any]) -> str:
    b, s = result["burst"], result["steady"]
    cert = (b.get("certification") or {}).get("aborted_share_pct")
    steady_cert = (s.get("certification") or {}).get("aborted_share_pct")

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    return "| " + " | ".join(cell(v) for v in (
        result["topology"], b["starts_per_s"], b["lateness_p50_ms"], b["lateness_p99_ms"],
        b["statements_per_execution"], cert, s["lateness_p50_ms"], s["lateness_p99_ms"], s["executions_per_s"],
        steady_cert, b["duplicates"] + s["duplicates"], b["missed"] + s["missing"], b["skipped"] + s["skipped"])) + " |"


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--tasks", type=int, default=1_000, help="the burst's tasks")
    parser.add_argument("--steady-tasks", type=int, default=300, help="tasks due every minute of the steady run")
    parser.add_argument("--minutes", type=int, default=2, help="minutes of the steady run")
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrency per node")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON")
    args = parser.parse_args()
    for name in ("tasks", "steady_tasks", "minutes", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"cannot start a Galera cluster here: {problem}")
    results = []
    with GaleraCluster(size=1, wsrep=False, verbose=True) as server:
        results.append(_run("one server", (server.url(0),), None, args))
    with GaleraCluster(size=NODES, verbose=True) as cluster:
        each = tuple(cluster.url(i) for i in range(NODES))
        results.append(_run("galera, a node each", each, cluster, args))
        results.append(_run("galera, one node", (cluster.url(0),), cluster, args))
        results.append(_run("galera, a node each, sync_wait 0", each, cluster, args, sync_wait=0))
    print(f"Burst: {args.tasks} tasks due at once; steady: {args.steady_tasks} tasks every minute for {args.minutes} "
          f"minutes; {NODES} scheduler nodes, {args.concurrency} threads each; MariaDB "
          f"{results[0]['burst']['backend']} servers started by this run on this host")
    print("| topology | burst starts / s | burst lateness p50 ms | p99 ms | statements / execution | burst aborted % "
          "| steady lateness p50 ms | p99 ms | executions / s | steady aborted % | duplicates | missed | skipped |")
    print("|" + " --- |" * 13)
    for result in results:
        print(_row(result))
    print(limits.machine_line(limits.machine()))
    if args.json:
        print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
