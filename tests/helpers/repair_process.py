"""Repair one execution's logs from a separate process; every hook records that it was called."""

from __future__ import annotations

import json
import sys
from typing import Any

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.db import close_engine, create_engine


def main(url: str, occurrence_id: str, calls_file: str) -> None:
    def record(name: str) -> Any:
        def hook(event: Any) -> None:
            with open(calls_file, "a") as out:
                out.write(f"{name}\n")

        return hook

    engine = create_engine(url)
    hooks = {name: record(name) for name in ("on_task_start", "on_task_execute", "on_task_finish", "on_task_error")}
    scheduler = Scheduler(engine, SchedulerConfig(node_id=f"repairer-{occurrence_id[:6]}"), hooks=hooks)
    scheduler.init()
    try:
        result = scheduler.execution.repair_log(occurrence_id)
    finally:
        scheduler.close()
        close_engine(engine)
    print(json.dumps({"log_persistence": result.log_persistence, "repaired": result.repaired}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
