"""The start floor: how soon this host could have a minute's occurrences started, at best.

A node may call an occurrence's handler only after two commits: its claim (the journal row,
``running`` under a DB-clock lease, and the task's slot) and its attempt's begin. This script
makes exactly those writes with the product's own store (``ExecutionRepository.claim`` and
``begin_attempts``, the statements and engine settings the nodes use) for N occurrences due at
the same instant, from K processes (``--nodes``, one per node, each with its share), and nothing else: no
tick, no handlers, no pool threads, no terminal commits, no logs. Each process claims in batches
of ``--batch`` on one connection while a second thread begins each claimed batch on another, so
that claims and begins overlap as they do in a node. An occurrence counts as started when its
begin has committed.

Its figures are the lateness a node could reach on this host if all its own work were free:
p50 / p99 / max of (begin committed - the common start instant), and starts per second.
``steady.py`` measures the same floor in the same run, for its own task count and node count,
and prints its lateness as a multiple of it: a figure that travels between machines, where the
absolute milliseconds do not.

    .venv/bin/python bench/start_floor.py --backend postgresql --count 1000 --nodes 2
    .venv/bin/python bench/start_floor.py --backend postgresql --batch 64 --repeat 3 --json
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from _common import BENCH_DIR, PYTHON, add_common_args, base_parser, finish, percentile, run_on_targets
from sqlalchemy import delete, insert
from sqlalchemy.engine import Engine

from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.db.tables import executions, slots
from scheduler_core.model import Attempt
from scheduler_core.store.executions import BeginRequest, ClaimRequest, ExecutionRepository
from scheduler_core.store.transactions import write

LEASE_MS = 300_000
TASK_PREFIX = "floor-"
COLUMNS = [("backend", "database"), ("count", "occurrences"), ("processes", "processes"), ("batch", "batch"),
           ("floor_p50_ms", "started p50 ms"), ("floor_p99_ms", "p99 ms"), ("floor_max_ms", "all started ms"),
           ("starts_per_s", "starts / s")]


def _task_id(i: int) -> str:
    return f"{TASK_PREFIX}{i:06d}"


def _reset(engine: Engine, count: int) -> None:
    """Free slot rows for ``count`` tasks and no journal rows of theirs."""
    def work(conn: Any) -> None:
        conn.execute(delete(executions).where(executions.c.task_id.like(f"{TASK_PREFIX}%")))
        conn.execute(delete(slots).where(slots.c.task_id.like(f"{TASK_PREFIX}%")))
        for start in range(0, count, 1_000):
            conn.execute(insert(slots), [{"task_id": _task_id(i), "occurrence_id": None, "execution_token": None,
                                          "updated_at": 0} for i in range(start, min(count, start + 1_000))])
    write(engine, work)


def measure(url: str, count: int = 1_000, processes: int = 2, batch: int = 100, repeat: int = 1) -> dict[str, Any]:
    """The floor on ``url``: the best of ``repeat`` rounds (by p50), each on fresh rows."""
    engine = create_engine({"url": url, "pool_size": 2})
    try:
        upgrade(engine)
        rounds = []
        for _ in range(repeat):
            _reset(engine, count)
            rounds.append(_round(url, count, processes, batch))
        _reset(engine, 0)
    finally:
        close_engine(engine)
    best = min(rounds, key=lambda r: r["floor_p50_ms"])
    return {**best, "rounds_p50_ms": [r["floor_p50_ms"] for r in rounds]}


def _round(url: str, count: int, processes: int, batch: int) -> dict[str, Any]:
    start_at = time.time() + 2.0 + 0.5 * processes  # every process connected and warm before it
    procs = [subprocess.Popen([PYTHON, str(BENCH_DIR / "start_floor.py"), "--worker", json.dumps({
        "url": url, "ids": list(range(k, count, processes)), "batch": batch, "start_at": start_at, "k": k})],
        stdout=subprocess.PIPE, text=True) for k in range(processes)]
    started: list[float] = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"start_floor worker exited {proc.returncode}")
        started.extend(json.loads(out.strip().splitlines()[-1])["started_ms"])
    if len(started) != count:
        raise RuntimeError(f"{len(started)} of {count} occurrences began")
    last = max(started)
    return {"count": count, "processes": processes, "batch": batch,
            "floor_p50_ms": round(percentile(started, 0.5) or 0, 1),
            "floor_p99_ms": round(percentile(started, 0.99) or 0, 1),
            "floor_max_ms": round(last, 1), "starts_per_s": round(count / (last / 1000), 1) if last else None}


def _worker(spec: dict[str, Any]) -> None:
    """One process: claim its share in batches, begin each claimed batch on a second thread."""
    engine = create_engine({"url": spec["url"], "pool_size": 3})
    repo = ExecutionRepository(engine, f"floor-node-{spec['k']}", LEASE_MS)
    namespace = uuid.uuid4()
    _warm(repo, spec["k"])
    ids: list[int] = spec["ids"]
    batches = [ids[i:i + spec["batch"]] for i in range(0, len(ids), spec["batch"])]
    claimed: queue.Queue[list[ClaimRequest] | None] = queue.Queue()
    started: list[float] = []

    def begin_all() -> None:
        while (requests := claimed.get()) is not None:
            now = int(time.time() * 1000)
            began = repo.begin_attempts([BeginRequest(r.occurrence_id, r.token, (Attempt(
                log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id=repo.node_id, started_at=now),))
                for r in requests])
            at = (time.time() - spec["start_at"]) * 1000
            started.extend(at for _ in began)

    beginner = threading.Thread(target=begin_all)
    beginner.start()
    late = time.time() - spec["start_at"]
    if late > 0:  # the times below are counted from the common start: this one would count its warm-up
        claimed.put(None)
        beginner.join()
        raise SystemExit(f"start_floor worker {spec['k']}: ready {late:.2f} s after the common start")
    time.sleep(-late)
    for chunk in batches:
        requests = [ClaimRequest(occurrence_id=str(uuid.uuid5(namespace, _task_id(i))), task_id=_task_id(i),
                                 task_revision=1, trigger="cron", max_attempts=1,
                                 token=str(uuid.uuid5(namespace, f"token-{i}"))) for i in chunk]
        results = repo.claim(requests)
        won = {r.occurrence_id for r in results if r.outcome == "claimed"}
        claimed.put([r for r in requests if r.occurrence_id in won])
    claimed.put(None)
    beginner.join()
    close_engine(engine)
    print(json.dumps({"started_ms": started}))


def _warm(repo: ExecutionRepository, k: int) -> None:
    """Connections open and the statement caches filled, on rows outside the measurement."""
    for _ in range(2):
        requests = [ClaimRequest(occurrence_id=str(uuid.uuid4()), task_id=f"warm-{k}-{uuid.uuid4().hex[:8]}",
                                 task_revision=1, trigger="cron", max_attempts=1, token=str(uuid.uuid4()))
                    for _ in range(3)]
        repo.claim(requests)
        repo.begin_attempts([BeginRequest(r.occurrence_id, r.token, (Attempt(
            log_id=str(uuid.uuid4()), attempt=1, sequence=1, node_id=repo.node_id, started_at=0),))
            for r in requests])
    write(repo.engine, lambda conn: (conn.execute(delete(executions).where(executions.c.task_id.like(f"warm-{k}-%"))),
                                     conn.execute(delete(slots).where(slots.c.task_id.like(f"warm-{k}-%")))))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(json.loads(sys.argv[2]))
        return
    parser = base_parser(__doc__)
    add_common_args(parser)
    parser.add_argument("--count", type=int, default=1_000, help="occurrences due at once (default 1,000)")
    parser.add_argument("--batch", type=int, default=100, help="rows per claim and per begin (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best p50 is reported (default 3)")
    args = parser.parse_args()
    for name, low, high in (("count", 1, 100_000), ("nodes", 1, 16), ("batch", 1, 1_000), ("repeat", 1, 20)):
        if not low <= getattr(args, name) <= high:
            parser.error(f"--{name} must be {low}..{high}")
    rows = run_on_targets(args, parser, "floor", lambda target: measure(
        target.url, args.count, args.nodes, args.batch, args.repeat))
    finish(COLUMNS, rows, "The start floor: claim + begin only, the product's store, all due at once", args.json)


if __name__ == "__main__":
    main()
