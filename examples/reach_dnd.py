"""Notifications in development: the console provider, a do-not-disturb delay, the queue.

    .venv/bin/python examples/reach_dnd.py

The DND window here is "the hour around now", so the message is held: send() returns a
durable queue receipt, and queue.get() shows its safe metadata (never the body or recipient).
"""

from __future__ import annotations

import time

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import close_engine, create_engine
from scheduler_core.reach import Reach


def main() -> None:
    engine = create_engine("sqlite:///scheduler.db")
    now = time.gmtime()
    reach = Reach(engine, {
        "providers": [{"name": "log", "type": "console"}],       # metadata only; refused in production
        "templates": [{"name": "otp", "provider": "log", "subject": "Your code", "body": "Code {code}"}],
        "dnd": {"enabled": True, "strategy": "delay", "timezone": "UTC",
                "start": f"{(now.tm_hour - 1) % 24:02d}:00", "end": f"{(now.tm_hour + 1) % 24:02d}:00"},
        "queue": {"max_attempts": 5, "retry_delay_ms": 60_000, "max_retry_delay_ms": 3_600_000},
    })
    reach.init()
    result = reach.send({"template": "otp", "to": "ops@example.com", "vars": {"code": "123456"}})
    print(f"deferred={result.deferred} queue_id={result.queue_id}")
    print(reach.queue.get(result.queue_id or ""))

    scheduler = Scheduler(engine, SchedulerConfig())
    scheduler.init()
    reach.attach(scheduler)   # rounds run on this node's tick, once a minute outside the window
    scheduler.start()
    time.sleep(2)
    scheduler.close()
    reach.close()
    close_engine(engine)


if __name__ == "__main__":
    main()
