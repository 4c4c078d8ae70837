"""The scheduler node hosted by a dashboard worker process (started by gunicorn's hooks)."""

from __future__ import annotations

import logging
import os
import socket

from flask import Flask

from scheduler_core import Scheduler, SchedulerConfig

logger = logging.getLogger("webapp.node")


def start_node(app: Flask) -> Scheduler:
    node_id = f"{socket.gethostname()[:80]}-web-{os.getpid()}"
    scheduler = Scheduler(app.extensions["hai_engine"], SchedulerConfig(node_id=node_id, max_concurrency=4))
    scheduler.init()
    scheduler.start()
    app.extensions["hai_scheduler"] = scheduler
    logger.info("scheduler node %s started", node_id)
    return scheduler


def stop_node(app: Flask) -> None:
    scheduler: Scheduler | None = app.extensions.pop("hai_scheduler", None)
    if scheduler is not None:
        scheduler.close()
