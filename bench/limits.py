"""This host's ceiling: what the database and driver allow, with the product's own engine settings.

Every other throughput figure is read against these, measured on the same machine in the same
invocation (burst.py and steady.py import this module and print their throughput as a share of
the one-transaction ceiling). Four operations, each run back to back on one connection of an
engine made by ``scheduler_core.db.create_engine`` (the product's pool, pre-ping, isolation,
SQLite WAL and ``BEGIN IMMEDIATE``), each write in its own ``write()`` transaction as the store
makes them, for ``--seconds`` each:

- ``round trip``: ``SELECT 1`` on a held connection (the floor of any statement);
- ``lease claim``: one transaction taking one expired journal row's lease by the DB clock
  (``UPDATE executions SET execution_token, lease_until = db_now + lease WHERE occurrence_id = :id
  AND lease_until < db_now``), a different row each time;
- ``claim + finish + log``: one transaction journaling an execution ``running`` with a DB-clock
  lease, finishing it ``success`` with its attempt, and inserting its log row -- an execution's
  whole SQL in one transaction: **the one-transaction ceiling**, in executions per second;
- ``batch claim x100``: one transaction journaling 100 executions ``running`` with leases (one
  multi-row INSERT), in transactions and rows per second.

Also printed: the machine (cores, CPU model, load average, a single-thread Python speed probe:
a fixed pure-Python loop, in million iterations per second) and the commit. The figures are for
this host at this moment; on a shared machine they move with the neighbours' load.

    .venv/bin/python bench/limits.py --db sqlite --db postgresql --db mysql
    .venv/bin/python bench/limits.py --db postgresql --seconds 5 --json
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import BACKENDS, Target, base_parser, fmt, open_target, print_table
from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db import close_engine, create_engine, db_now_ms, upgrade
from scheduler_core.db.tables import executions, logs
from scheduler_core.store.transactions import write

LEASE_MS = 300_000
BATCH = 100
COLUMNS = [("backend", "database"), ("round_trip_per_s", "round trips / s"),
           ("lease_claim_per_s", "lease claims / s"), ("one_tx_per_s", "claim + finish + log / s (ceiling)"),
           ("batch_tx_per_s", f"batch claims x{BATCH} / s"), ("batch_rows_per_s", "batch-claimed rows / s")]


# --- the machine and the commit ----------------------------------------------------------------


def python_speed() -> float:
    """Million iterations per second of a fixed pure-Python loop (best of 3), one thread."""
    best = 0.0
    for _ in range(3):
        began = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i * i % 7
        best = max(best, 2.0 / (time.perf_counter() - began))
    return round(best, 1)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "cpu": cpu_model(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "python_mips": python_speed(), "python": platform.python_version(), "commit": commit(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def machine_line(facts: dict[str, Any]) -> str:
    return (f"Machine: {facts['cores']} cores, {facts['cpu']}, load {facts['load_avg_1m']} (1 min), "
            f"Python {facts['python']} single-thread probe {facts['python_mips']} M loop iterations/s; "
            f"commit {facts['commit']}; {facts['date_utc']}")


# --- the four operations ----------------------------------------------------------------------


def _row(occurrence_id: str, status: str = "running") -> dict[str, Any]:
    return {"occurrence_id": occurrence_id, "task_id": "limits", "task_revision": 1, "trigger": "manual",
            "status": status, "sequence": 1, "attempt": 0, "max_attempts": 1, "attempts": [],
            "owner_node": "limits", "created_at": 0, "updated_at": 0}


def _timed(seconds: float, op: Callable[[int], None], limit: int | None = None) -> float:
    """Operations per second of ``op(i)`` run back to back for ``seconds`` (or ``limit`` times)."""
    done = 0
    began = time.perf_counter()
    deadline = began + seconds
    while time.perf_counter() < deadline and (limit is None or done < limit):
        op(done)
        done += 1
    return done / (time.perf_counter() - began)


def round_trips(engine: Engine, seconds: float) -> float:
    with engine.connect() as conn:
        result = _timed(seconds, lambda _: conn.execute(text("SELECT 1")).scalar_one())
        conn.rollback()
    return result


def lease_claims(engine: Engine, seconds: float, rows: int) -> float:
    ids = [f"lease-{i}" for i in range(rows)]
    for start in range(0, rows, 1_000):  # expired leases to take
        write(engine, lambda conn, chunk=ids[start:start + 1_000]: conn.execute(  # type: ignore[misc]
            insert(executions), [{**_row(i), "execution_token": "old", "lease_until": 0} for i in chunk]))
    claim = (update(executions).where(executions.c.occurrence_id == bindparam("oid"),
                                      executions.c.lease_until < db_now_ms())
             .values(execution_token=bindparam("token"), lease_until=db_now_ms() + LEASE_MS))

    def take(i: int) -> None:
        taken = write(engine, lambda conn: conn.execute(claim, {"oid": ids[i], "token": uuid.uuid4().hex}).rowcount)
        if taken != 1:
            raise RuntimeError(f"lease claim of {ids[i]} changed {taken} rows")

    return _timed(seconds, take, limit=rows)


def one_transaction(engine: Engine, seconds: float) -> float:
    """Claim + finish + log of one execution, in one transaction."""
    now = db_now_ms()
    claim = insert(executions).values(execution_token=bindparam("token"), lease_until=now + LEASE_MS,
                                      created_at=now, updated_at=now)
    finish = (update(executions).where(executions.c.occurrence_id == bindparam("oid"),
                                       executions.c.execution_token == bindparam("token"),
                                       executions.c.lease_until > db_now_ms())
              .values(status="success", attempt=1, attempts=bindparam("attempts"), lease_until=None,
                      log_persistence="persisted", updated_at=db_now_ms()))
    log = insert(logs).values(started_at=now, finished_at=now, created_at=now)

    def work(conn: Connection, oid: str, token: str, log_id: str) -> None:
        conn.execute(claim, {**_row(oid), "token": token})
        attempt = {"log_id": log_id, "attempt": 1, "sequence": 1, "node_id": "limits", "status": "success"}
        if conn.execute(finish, {"oid": oid, "token": token, "attempts": [attempt]}).rowcount != 1:
            raise RuntimeError(f"finish of {oid} changed nothing")
        conn.execute(log, {"id": log_id, "occurrence_id": oid, "task_id": "limits", "trigger": "manual",
                           "status": "success", "sequence": 1, "attempt": 1, "node_id": "limits"})

    return _timed(seconds, lambda _: write(engine, lambda conn: work(
        conn, str(uuid.uuid4()), uuid.uuid4().hex, str(uuid.uuid4()))))


def batch_claims(engine: Engine, seconds: float) -> float:
    now = db_now_ms()
    claim = insert(executions).values(execution_token=bindparam("token"), lease_until=now + LEASE_MS,
                                      created_at=now, updated_at=now)

    def take(_: int) -> None:
        rows = [{**_row(str(uuid.uuid4())), "token": uuid.uuid4().hex} for _ in range(BATCH)]
        write(engine, lambda conn: conn.execute(claim, rows))

    return _timed(seconds, take)


def measure(url: str, seconds: float) -> dict[str, Any]:
    """The four ceilings on ``url`` (schema migrated; the rows it journals are deleted after)."""
    engine = create_engine({"url": url, "pool_size": 4})
    try:
        upgrade(engine)
        write(engine, lambda conn: (conn.execute(delete(logs)), conn.execute(delete(executions))))
        result = {"round_trip_per_s": round_trips(engine, seconds)}
        result["lease_claim_per_s"] = lease_claims(engine, seconds, rows=max(2_000, int(seconds * 5_000)))
        result["one_tx_per_s"] = one_transaction(engine, seconds)
        result["batch_tx_per_s"] = batch_claims(engine, seconds)
        result["batch_rows_per_s"] = result["batch_tx_per_s"] * BATCH
        write(engine, lambda conn: (conn.execute(delete(logs)), conn.execute(delete(executions))))
        with engine.connect() as conn:  # what the SQLite file / server says it is
            version = str(conn.execute(select(text("sqlite_version()" if engine.dialect.name == "sqlite"
                                                   else "version()"))).scalar_one())
            result["server"] = " ".join(version.split()[:2]) if engine.dialect.name == "postgresql" else version
            conn.rollback()
        return {key: round(value, 1) if isinstance(value, float) else value for key, value in result.items()}
    finally:
        close_engine(engine)


def ceiling_line(result: dict[str, Any]) -> str:
    return (f"Ceiling on {result.get('backend', '?')} ({result.get('server', '?')}): "
            f"{fmt(result['one_tx_per_s'])} claim + finish + log transactions / s on one connection; "
            f"round trip {fmt(result['round_trip_per_s'])} / s, lease claim {fmt(result['lease_claim_per_s'])} / s, "
            f"batch x{BATCH} {fmt(result['batch_rows_per_s'])} rows / s")


def share(value: float | None, ceiling: float | None) -> float | None:
    """``value`` as a percentage of ``ceiling``."""
    if not value or not ceiling:
        return None
    return round(100.0 * value / ceiling, 1)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--db", action="append", choices=BACKENDS,
                        help="measure a fresh database of this kind (repeatable; default sqlite)")
    parser.add_argument("--url", action="append", default=[],
                        help="measure this existing database (journal and log rows are deleted: needs --reset)")
    parser.add_argument("--reset", action="store_true", help="allow deleting the journal and logs of a --url")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per operation (default 3)")
    parser.add_argument("--json", action="store_true", help="also print every result row as JSON")
    args = parser.parse_args()
    if args.url and not args.reset:
        parser.error("--reset is required: the measurement deletes the journal and logs of --url")
    facts = machine()
    targets = [Target(kind, f"{kind}:new:limits") for kind in (args.db or ([] if args.url else ["sqlite"]))]
    targets = [Target(url.split(":", 1)[0].split("+", 1)[0], url) for url in args.url] + targets
    rows = []
    for target in targets:
        with open_target(target) as opened:
            print(f"[limits] {opened.label}: {opened.shown}", file=sys.stderr, flush=True)
            rows.append({"backend": opened.label, **measure(opened.url, args.seconds)})
    print_table(COLUMNS, rows, f"This host's ceiling, {args.seconds:g} s per operation, one connection")
    print(f"\n{machine_line(facts)}")
    if args.json:
        for row in rows:
            print(json.dumps({**row, "machine": facts}))


if __name__ == "__main__":
    main()
