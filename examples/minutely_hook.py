"""Embed a scheduler in your own program: a hook task that fires every minute on SQLite.

    .venv/bin/python examples/minutely_hook.py            # Ctrl-C to stop
    .venv/bin/python examples/minutely_hook.py --minutes 3

Start it twice (two terminals, same directory): both processes share scheduler.db, and each
minute's occurrence still runs exactly once, on one of them.
"""

from __future__ import annotations

import argparse
import os
import threading
from datetime import UTC, datetime
from typing import Any

from scheduler_core import Scheduler, SchedulerConfig, TaskDefinition, TaskEvent
from scheduler_core.db import close_engine, create_engine


def report(event: TaskEvent) -> dict[str, Any]:
    minute = datetime.fromtimestamp((event.context.scheduled_minute or 0) / 1000, UTC)
    print(f"[pid {os.getpid()}] {event.context.task_id} fired for {minute:%H:%M} UTC "
          f"(occurrence {event.context.occurrence_id}, attempt {event.context.attempt})", flush=True)
    return {"channel": event.context.params.get("channel")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("HAI_DATABASE_URL", "sqlite:///scheduler.db"))
    parser.add_argument("--minutes", type=float, default=None, help="stop after this many minutes")
    args = parser.parse_args()

    engine = create_engine(args.database_url)
    scheduler = Scheduler(engine, SchedulerConfig(tick_interval_ms=1000), hooks={"on_task_execute": report},
                          tasks=[TaskDefinition(id="minutely-report", name="Minutely report", cron="* * * * *",
                                                handler={"kind": "hook"}, params={"channel": "ops"})])
    scheduler.init()  # creates the schema if needed and stores the declared task
    scheduler.start()
    print(f"node {scheduler.config.node_id} running; tasks: {[t.id for t in scheduler.tasks]}", flush=True)
    try:
        threading.Event().wait(args.minutes * 60 if args.minutes else None)
    except KeyboardInterrupt:
        pass
    finally:
        scheduler.close()
        close_engine(engine)


if __name__ == "__main__":
    main()
