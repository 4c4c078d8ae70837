"""One node of bench/burst.py: counts its SQL, transactions, CPU time and handler calls.

Counted with SQLAlchemy events on this node's engine, from ``start()`` to ``close()``:
- ``statements``: every ``before_cursor_execute`` (every statement sent through a cursor,
  including SQLite's ``BEGIN IMMEDIATE``, which our engine set-up issues as a statement);
- ``commits`` / ``rollbacks``: the ``commit`` / ``rollback`` events (every transaction ends in
  exactly one of them; read-only transactions end in a rollback);
- ``begins``: the ``begin`` event; on PostgreSQL and MySQL the driver sends BEGIN itself
  (no cursor statement);
- ``checkouts``: connections taken from the pool; on PostgreSQL and MySQL each is pinged
  first (``pool_pre_ping``), one more round trip.
So ``statements + begins + commits + rollbacks + checkouts`` is every command the node sent
to a PostgreSQL or MySQL server (on SQLite, in-process, the BEGIN is among the statements).

With ``HAI_BENCH_PROFILE_DIR`` set (``burst.py --profile DIR``) every thread runs under cProfile
and the merged stats go to ``DIR/<node_id>.prof`` (profiling slows the node: its CPU figures are
then not the product's).

Prints one JSON line on exit, with the occurrence id of every handler call (the bench checks
that no occurrence was started twice) and the DB time at which its first tick began (the
bench checks that every node was up before the boundary).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import signal
import sys
import threading
import time
from typing import Any

from _common import galera_sync_wait_from_env
from sqlalchemy import event

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.testing import set_clock_offset_from_env


class ThreadProfiles:
    """cProfile for every thread started from now on (cProfile sees one thread only): each
    thread's ``run`` gets a profiler of its own; ``dump`` merges them into one stats file."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        original = threading.Thread.run
        profiles = self.profiles

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            profiles.append(profile)
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign]

    def dump(self, path: str) -> None:
        stats = None
        for profile in list(self.profiles):
            profile.disable()  # a daemon thread still running: its calls so far
            try:
                stats = pstats.Stats(profile) if stats is None else stats.add(profile)
            except TypeError:  # a profile that recorded nothing
                continue
        if stats is not None:
            stats.dump_stats(path)


def main(url: str, node_id: str, concurrency: int, max_queued: int) -> None:
    profile_dir = os.environ.get("HAI_BENCH_PROFILE_DIR")
    profiles = ThreadProfiles() if profile_dir else None
    engine = create_engine({"url": url, "pool_size": concurrency + 4})
    set_clock_offset_from_env(engine)  # HAI_TEST_DB_CLOCK_OFFSET_MS: the burst's minute is near
    counts = {"statements": 0, "commits": 0, "rollbacks": 0, "begins": 0, "checkouts": 0}
    calls: list[str] = []
    lock = threading.Lock()

    def counter(name: str) -> Any:
        def count(*_: Any) -> None:
            with lock:
                counts[name] += 1

        return count

    event.listen(engine, "before_cursor_execute", counter("statements"))
    event.listen(engine, "commit", counter("commits"))
    event.listen(engine, "rollback", counter("rollbacks"))
    event.listen(engine, "begin", counter("begins"))
    event.listen(engine, "checkout", counter("checkouts"))

    def execute(event_: Any) -> Any:
        calls.append(event_.context.occurrence_id)  # list.append is atomic under the GIL
        return None

    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, max_concurrency=concurrency, max_queued=max_queued),
                          hooks={"on_task_execute": execute})
    scheduler.init()
    galera_sync_wait_from_env(engine)  # after init, whose Galera check would refuse it
    stop = stop_on_signals((signal.SIGTERM,))
    with lock:
        for name in counts:
            counts[name] = 0  # count the running node, not its start-up
    ticks: list[int] = []  # DB time at the start of each tick that completed
    scheduler.add_tick_listener(ticks.append)
    cpu_before = time.process_time()
    scheduler.start()
    wait_for_stop(stop)
    scheduler.close()
    cpu_ms = int((time.process_time() - cpu_before) * 1000)
    if profiles is not None and profile_dir:
        profiles.dump(os.path.join(profile_dir, f"{node_id}.prof"))
    print(json.dumps({**counts, "cpu_ms": cpu_ms, "ticks": len(ticks), "first_tick_db_ms": ticks[0] if ticks else None,
                      "started": len(calls), "calls": calls}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
