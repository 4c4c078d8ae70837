"""A node process that declares tasks and runs init() at an agreed instant (concurrent start-up).

Usage: declare_process.py DATABASE_URL START_AT_EPOCH_S TASKS

Prints one JSON line: {"ok": true} or {"ok": false, "code": ..., "error": ...}.
"""

from __future__ import annotations

import json
import sys
import time

from scheduler_core import Scheduler, SchedulerConfig, SchedulerError, TaskDefinition
from scheduler_core.db import close_engine, create_engine


def main() -> None:
    url, start_at, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    tasks = [TaskDefinition(id=f"declared-{n}", name=f"Declared {n}", cron="0 3 * * *", idempotent=True,
                            retry={"max_attempts": 2, "backoff_ms": [10]}, params={"n": n}) for n in range(count)]
    engine = create_engine(url)
    scheduler = Scheduler(engine, SchedulerConfig(tick_interval_ms=1000), tasks=tasks)
    time.sleep(max(0.0, start_at - time.time()))
    try:
        scheduler.init()
        result = {"ok": True, "tasks": len(scheduler.tasks)}
    except SchedulerError as exc:
        result = {"ok": False, "code": exc.code, "error": str(exc)}
    finally:
        scheduler.close()
        close_engine(engine)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
