"""A scheduler node in its own OS process for the failover scenarios (tests/ha/scenario.py).

Usage: ha_node.py URL NODE_ID EVENTS_FILE [options as JSON]

Options: {"lease_ms": 8000, "tick_interval_ms": 200, "max_concurrency": 4,
          "sleep_s": {"task-id": seconds}, "connect_timeout_ms": 3000, "max_seconds": 1800}

What tests/helpers/fault_node.py does for the oracle, without its kill switch: the hook appends
one ``effect`` line per call to EVENTS_FILE (tests/helpers/oracle.py's format, fsync'ed before
the handler goes on) with the wall time it started (``at``), so a scenario can tell when the
first handler ran after the primary died. ``api`` tasks are run by the product's own executor.
A ``ready`` line once the tick loop runs; SIGTERM closes the scheduler cleanly (exit status 0).
``HAI_TEST_DB_CLOCK_OFFSET_MS`` moves the node's DB clock (scheduler_core.testing). The log
(WARNING and up) goes to stderr, which the scenario sends to a file per node.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from dataclasses import asdict
from typing import Any

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.testing import set_clock_offset_from_env
from tests.helpers.oracle import Effect, append_event


def main() -> None:
    url, node_id, events = sys.argv[1], sys.argv[2], sys.argv[3]
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {node_id} %(levelname)s %(name)s %(message)s")
    options: dict[str, Any] = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    sleeps: dict[str, float] = options.get("sleep_s", {})

    def execute(hook_event: Any) -> Any:
        ctx = hook_event.context
        effect = Effect(ctx.task_id, ctx.occurrence_id, ctx.attempt, ctx.sequence, node_id, os.getpid())
        append_event(events, {"kind": "effect", **asdict(effect), "at": time.time()})
        pause = sleeps.get(ctx.task_id, 0)
        if pause:
            hook_event.signal.wait(pause)
        return {"node": node_id}

    concurrency = options.get("max_concurrency", 4)
    engine = create_engine({"url": url, "pool_size": concurrency + 4,
                            "connect_timeout_ms": options.get("connect_timeout_ms", 3_000)})
    set_clock_offset_from_env(engine)
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, lease_ms=options.get("lease_ms", 8_000),
                                                  tick_interval_ms=options.get("tick_interval_ms", 200),
                                                  max_concurrency=concurrency),
                          hooks={"on_task_execute": execute})
    scheduler.init()
    stop = stop_on_signals((signal.SIGTERM,))
    scheduler.start()
    append_event(events, {"kind": "ready", "node": node_id, "pid": os.getpid(), "at": time.time()})
    wait_for_stop(stop, options.get("max_seconds", 1800))
    scheduler.close()
    engine.dispose()
    append_event(events, {"kind": "stopped", "node": node_id, "pid": os.getpid(), "at": time.time()})


if __name__ == "__main__":
    main()
