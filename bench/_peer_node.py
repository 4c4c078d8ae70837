"""One APScheduler 3 process of peer.py: a BackgroundScheduler on a SQLAlchemyJobStore shared
with the other processes -- what a team gets when it runs APScheduler in every gunicorn worker.

Usage: _peer_node.py '{"url": ..., "threads": 10}'

Each job calls :func:`record_run`, which inserts (job id, scheduled minute, pid, start time)
into ``peer_runs``: the job's own record of its side effects. APScheduler's own defaults are
kept (thread pool of 10, no coalescing) unless the options say otherwise; the jobs carry their
``misfire_grace_time`` (set by peer.py when it adds them). On SIGTERM it shuts down (waiting
for running jobs) and prints one JSON line: its pid, CPU time, the SQL it sent (counted as
_node.py counts ours) and how many runs APScheduler reported as missed or failed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from typing import Any

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table
from sqlalchemy.engine import Engine

metadata = MetaData()
peer_runs = Table(
    "peer_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(64), nullable=False),
    Column("scheduled_minute", BigInteger, nullable=False),  # unix ms of the minute the job was due
    Column("pid", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),  # unix ms, host clock (the database runs on this host)
)
JOB_TABLE = "apscheduler_jobs"
ENGINE: Engine | None = None  # bound by main() on the module APScheduler imports (see there)


def record_run(job_id: str, scheduled_minute: int) -> None:
    """The job: note that it ran, where and when."""
    started = int(time.time() * 1000)
    assert ENGINE is not None
    with ENGINE.begin() as conn:
        conn.execute(peer_runs.insert().values(job_id=job_id, scheduled_minute=scheduled_minute, pid=os.getpid(),
                                               started_at=started))


def main(options: dict[str, Any]) -> None:
    import _peer_node
    from _node import Meter, delta
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent  # type: ignore[import-untyped]
    from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-untyped]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

    from scheduler_core.db import create_engine

    threads = int(options.get("threads", 10))
    engine = create_engine({"url": options["url"], "pool_size": threads + 4})
    # The jobs name their function "_peer_node:record_run": APScheduler imports this file as the
    # module _peer_node (not __main__), so that module is the one that needs the engine.
    _peer_node.ENGINE = engine
    meter = Meter(engine)  # the SQL counted as _node.py counts ours
    events: Counter[str] = Counter()
    lock = threading.Lock()

    def on_event(event: JobExecutionEvent) -> None:
        with lock:
            events["missed" if event.code == EVENT_JOB_MISSED else "errors"] += 1

    scheduler = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(engine=engine, tablename=JOB_TABLE)},
        executors={"default": ThreadPoolExecutor(threads)}, timezone="UTC")
    scheduler.add_listener(on_event, EVENT_JOB_MISSED | EVENT_JOB_ERROR)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    began = meter.read()  # count the running scheduler, not the engine's health check
    scheduler.start()
    stop.wait()
    scheduler.shutdown(wait=True)
    used = delta(began, meter.read())
    engine.dispose()
    print(json.dumps({"pid": os.getpid(), **used, **events}), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
