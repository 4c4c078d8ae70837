"""A scheduler node with notifications and alert rules, in its own process; it can kill itself
in the middle of raising an alert (SIGKILL), to show that a fact still alerts exactly once.

Usage: alert_node.py URL NODE_ID REACH_CONFIG_JSON [KILL_AT]

KILL_AT: ``in_raise`` -- at the alert's queue insert, inside the transaction that records the
fact (nothing of it commits); ``after_raise`` -- at the first statement after that transaction
committed (the fact is recorded, the detector's cursor not yet moved). Prints "ready" once the
node runs; SIGTERM closes it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from sqlalchemy import event

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.reach import Reach
from scheduler_core.testing import set_clock_offset_from_env


def main() -> None:
    url, node_id, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    kill_at = sys.argv[4] if len(sys.argv) > 4 else None
    engine = create_engine({"url": url, "pool_size": 16})
    set_clock_offset_from_env(engine)
    raised = threading.Event()

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.split()).upper()
        if kill_at == "in_raise" and text.startswith("INSERT INTO REACH_QUEUE"):
            os.kill(os.getpid(), signal.SIGKILL)
        if kill_at == "after_raise" and raised.is_set():
            os.kill(os.getpid(), signal.SIGKILL)

    def committed(conn: Any) -> None:
        if conn.info.pop("alert_raised", False):
            raised.set()

    def inserted(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if " ".join(statement.split()).upper().startswith("INSERT INTO REACH_QUEUE"):
            conn.info["alert_raised"] = True

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", inserted)
    event.listen(engine, "commit", committed)
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, tick_interval_ms=200, lease_ms=3000))
    scheduler.init()
    reach = Reach(engine, config, node_id=node_id, public_url="https://scheduler.example")
    reach.init()
    reach.attach(scheduler)
    stop = stop_on_signals((signal.SIGTERM,))
    scheduler.start()
    print("ready", flush=True)
    wait_for_stop(stop, 120)
    reach.close()
    scheduler.close()
    engine.dispose()


if __name__ == "__main__":
    main()
