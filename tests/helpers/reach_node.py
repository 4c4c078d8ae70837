"""A scheduler node with notification rounds attached, in its own OS process.

Usage: reach_node.py URL NODE_ID READY_FILE REACH_CONFIG_JSON
Prints nothing; appends "ready" to READY_FILE once running; SIGTERM closes it cleanly.
``HAI_TEST_DB_CLOCK_OFFSET_MS`` moves the node's DB clock (scheduler_core.testing).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.reach import Reach
from scheduler_core.testing import set_clock_offset_from_env


def main(url: str, node_id: str, ready_file: str, config_json: str) -> None:
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {node_id} %(name)s %(message)s")
    engine = create_engine({"url": url})  # the default pool holds the node's connections and the rounds'
    set_clock_offset_from_env(engine)
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, tick_interval_ms=200))
    scheduler.init()
    reach = Reach(engine, json.loads(config_json), node_id=node_id)
    reach.init()
    reach.attach(scheduler)
    stop = stop_on_signals((signal.SIGTERM,))
    scheduler.start()
    with open(ready_file, "a") as out:
        out.write(f"ready {node_id} {os.getpid()}\n")
    wait_for_stop(stop, 300)
    scheduler.close()
    reach.close()
    engine.dispose()


if __name__ == "__main__":
    main(*sys.argv[1:5])
