"""A scheduler node in its own OS process, for multi-node and crash tests.

Usage: node_process.py URL NODE_ID EFFECTS_FILE [options as JSON]

Options: {"lease_ms": 3000, "tick_interval_ms": 200, "sleep_s": {"task-id": seconds},
          "trigger": {"task": "id", "key": "k", "go_file": "path"}, "block_forever": false,
          "hooks": true, "groups": ["billing"], "clock_file": "path",
          "fail": {"task-id": [minutes it succeeds at, unix ms]}}

``"hooks": false`` makes a node without the application's hooks (as a dashboard worker is).

The hook appends one line per call to EFFECTS_FILE ("effect <occurrence> <node> <sequence>
<attempt>"): the handler's own record of side effects, which the tests compare with the
journal. SIGTERM closes the scheduler cleanly; SIGKILL is what crash tests send.
``HAI_TEST_DB_CLOCK_OFFSET_MS`` moves the node's DB clock (scheduler_core.testing); with
``clock_file``, the node also reads the file every 20 ms and, when it holds a new number, makes it
the clock's offset (a test steps every node's DB clock a minute on at once). A hook that returns
appends "done <occurrence> <node>"; a task named in ``fail`` raises instead, unless its scheduled
minute is listed.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
from typing import Any

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import create_engine
from scheduler_core.process_stop import stop_on_signals, wait_for_stop
from scheduler_core.testing import set_clock_offset, set_clock_offset_from_env


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one short write: atomic with O_APPEND
    finally:
        os.close(fd)


def _follow_clock(engine: Any, path: str) -> None:
    seen = ""
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            text = ""
        if text and text != seen:
            seen = text
            set_clock_offset(engine, int(text))
        threading.Event().wait(0.02)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format=f"%(asctime)s {sys.argv[2]} %(name)s %(message)s")
    url, node_id, effects = sys.argv[1], sys.argv[2], sys.argv[3]
    options: dict[str, Any] = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    sleeps: dict[str, float] = options.get("sleep_s", {})
    failing: dict[str, list[int]] = options.get("fail", {})

    def execute(event: Any) -> Any:
        ctx = event.context
        _append(effects, f"effect {ctx.occurrence_id} {node_id} {ctx.sequence} {ctx.attempt}")
        pause = sleeps.get(ctx.task_id, 0)
        if options.get("block_forever"):
            pause = 3600
        if pause:
            event.signal.wait(pause)
        _append(effects, f"done {ctx.occurrence_id} {node_id}")
        if ctx.task_id in failing and ctx.scheduled_minute not in failing[ctx.task_id]:
            raise RuntimeError(f"{ctx.task_id} fails at {ctx.scheduled_minute}")
        return {"node": node_id}

    concurrency = options.get("max_concurrency", 6)
    engine = create_engine({"url": url, "pool_size": concurrency + 4})
    set_clock_offset_from_env(engine)
    if options.get("clock_file"):
        threading.Thread(target=_follow_clock, args=(engine, options["clock_file"]), daemon=True).start()
    hooks = {"on_task_execute": execute} if options.get("hooks", True) else None
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, lease_ms=options.get("lease_ms", 3000),
                                                  tick_interval_ms=options.get("tick_interval_ms", 200),
                                                  max_concurrency=concurrency,
                                                  max_queued=options.get("max_queued", SchedulerConfig.max_queued),
                                                  groups=tuple(options.get("groups", ()))),
                          hooks=hooks)
    scheduler.init()
    stop = stop_on_signals((signal.SIGTERM,))
    if options.get("start", True):
        scheduler.start()
    _append(effects, f"ready {node_id} {os.getpid()}")
    trigger = options.get("trigger")
    if trigger:
        while not os.path.exists(trigger["go_file"]):
            stop.wait(0.01)  # not time.sleep: see scheduler_core.store.transactions._pause
        log = scheduler.trigger(trigger["task"], source=node_id, idempotency_key=trigger.get("key"))
        _append(effects, f"triggered {node_id} {log.occurrence_id} {log.id} {log.status}")
    wait_for_stop(stop, options.get("max_seconds", 120))
    faulthandler.dump_traceback_later(40)  # a close() that hangs shows where (stop_nodes prints stderr)
    scheduler.close()
    faulthandler.cancel_dump_traceback_later()
    engine.dispose()


if __name__ == "__main__":
    main()
