"""One node of bench/burst.py: counts its SQL statements, transactions and CPU time."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from sqlalchemy import event

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine


def main(url: str, node_id: str, concurrency: int) -> None:
    engine = create_engine({"url": url, "pool_size": concurrency + 4})
    counts = {"statements": 0, "commits": 0, "started": 0}
    lock = threading.Lock()

    def on_statement(*_: Any) -> None:
        with lock:
            counts["statements"] += 1

    def on_commit(*_: Any) -> None:
        with lock:
            counts["commits"] += 1

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "commit", on_commit)

    def execute(event_: Any) -> Any:
        with lock:
            counts["started"] += 1
        return None

    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, max_concurrency=concurrency, max_queued=5_000),
                          hooks={"on_task_execute": execute})
    scheduler.init()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with lock:
        counts["statements"] = counts["commits"] = 0  # count the running node, not its start-up
    cpu_before = time.process_time()
    scheduler.start()
    stop.wait()
    scheduler.close()
    print(json.dumps({**counts, "cpu_ms": int((time.process_time() - cpu_before) * 1000)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
