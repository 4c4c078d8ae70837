"""One procrastinate worker of bench/peer_procrastinate.py: N periodic tasks due at one minute.

Registers one async task ``burst`` as N periodic tasks (``periodic_id`` p00000.., cron
``MINUTE HOUR * * *``, the periodic id passed as ``pid``), runs a worker (its periodic deferrer
included) until SIGTERM, and prints one JSON line: every call as [pid, scheduled timestamp (s),
start time (s, this host's clock, which the local PostgreSQL shares)], the SQL statements it
executed (psycopg ``AsyncCursor.execute`` calls, counted here) and its CPU time.

    python bench/_procrastinate_worker.py DSN COUNT MINUTE HOUR NAME CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import procrastinate
import psycopg

counts = {"statements": 0}
_execute = psycopg.AsyncCursor.execute


async def _counted(self: Any, *args: Any, **kwargs: Any) -> Any:
    counts["statements"] += 1
    return await _execute(self, *args, **kwargs)


psycopg.AsyncCursor.execute = _counted  # type: ignore[method-assign]


def main(dsn: str, count: int, minute: int, hour: int, name: str, concurrency: int) -> None:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    calls: list[list[Any]] = []

    @app.task(name="burst")
    async def burst(timestamp: int, pid: str) -> None:
        calls.append([pid, timestamp, time.time()])

    for i in range(count):
        pid = f"p{i:05d}"
        app.periodic(cron=f"{minute} {hour} * * *", periodic_id=pid, task_kwargs={"pid": pid})(burst)

    async def run() -> None:
        async with app.open_async():
            await app.run_worker_async(concurrency=concurrency, name=name, delete_jobs="never")

    cpu_before = time.process_time()
    asyncio.run(run())
    print(json.dumps({"calls": calls, "statements": counts["statements"],
                      "cpu_ms": int((time.process_time() - cpu_before) * 1000)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
