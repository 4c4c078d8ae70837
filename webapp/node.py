"""The scheduler of a dashboard process.

``create_app`` makes one ``Scheduler`` per app and initialises it (the operator API -- triggers,
resolutions, repairs -- goes through it). Under ``hai-scheduler serve`` gunicorn starts its
tick loop in each worker after the fork (``post_worker_init``): threads do not survive a fork,
so the app must not be preloaded in the master. ``worker_exit`` closes it, handing running
attempts over as DESIGN §5 Lifecycle says.
"""

from __future__ import annotations

import logging
import os
import socket

from flask import Flask
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig

logger = logging.getLogger("webapp.node")


def make_scheduler(engine: Engine) -> Scheduler:
    node_id = f"{socket.gethostname()[:80]}-web-{os.getpid()}"
    scheduler = Scheduler(engine, SchedulerConfig(node_id=node_id, max_concurrency=4))
    scheduler.init()
    return scheduler


def scheduler_of(app: Flask) -> Scheduler:
    scheduler: Scheduler = app.extensions["hai_scheduler"]
    return scheduler


def start_node(app: Flask) -> None:
    scheduler = scheduler_of(app)
    scheduler.start()
    logger.info("scheduler node %s started", scheduler.config.node_id)


def stop_node(app: Flask) -> None:
    scheduler_of(app).close()
