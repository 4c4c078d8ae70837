"""The scheduler of a dashboard process, and the other services its pages reach.

``create_app`` makes one ``Scheduler`` per app and initialises it (the operator API -- triggers,
resolutions, repairs -- goes through it), a ``Reach`` on the same engine, and the dashboard's
own ``Accounts`` (users) and ``AuditTrail``; the pages find each through an accessor here.
Under ``hai-scheduler serve`` gunicorn starts the scheduler's tick loop in each worker after the
fork (``post_worker_init``): threads do not survive a fork, so the app must not be preloaded in
the master. ``worker_exit`` closes it, handing running attempts over as docs/semantics.md ("Lifecycle") says.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from flask import Flask
from sqlalchemy.engine import Engine

from scheduler_core import Scheduler, SchedulerConfig
from scheduler_core.config import groups_from_text
from scheduler_core.errors import ReachConfigError
from scheduler_core.reach import Reach
from scheduler_core.runtime.accounts import Accounts, AuditTrail
from scheduler_core.runtime.hooks import load_hooks

logger = logging.getLogger("webapp.node")
NODE_CONCURRENCY = 4  # handler threads of the node in each dashboard worker


def make_scheduler(engine: Engine, settings: Mapping[str, Any]) -> Scheduler:
    """This worker's node: it runs hook tasks only with the application's hooks (``HOOKS``, from
    ``HAI_HOOKS`` or ``serve --hooks``), and serves the groups of ``NODE_GROUPS``."""
    node_id = f"{socket.gethostname()[:80]}-web-{os.getpid()}"
    spec = settings.get("HOOKS")
    hooks = load_hooks(spec, "HAI_HOOKS") if spec else None
    groups = settings.get("NODE_GROUPS") or ()
    config = SchedulerConfig(node_id=node_id, max_concurrency=NODE_CONCURRENCY,
                             groups=groups_from_text(groups) if isinstance(groups, str) else tuple(groups))
    scheduler = Scheduler(engine, config, hooks=hooks)
    scheduler.init()
    return scheduler


def reach_config(app: Flask) -> Mapping[str, Any]:
    """The notification configuration: ``REACH`` (a mapping, e.g. from ``HAI_CONFIG_FILE``) or the
    JSON file named by ``HAI_REACH_CONFIG``; no providers when neither is given."""
    if app.config.get("REACH") is not None:
        config: Mapping[str, Any] = app.config["REACH"]
        return config
    path = app.config.get("REACH_CONFIG")
    if not path:
        return {}
    try:
        with open(str(path), encoding="utf-8") as source:
            loaded: Mapping[str, Any] = json.load(source)
    except (OSError, ValueError) as exc:
        raise ReachConfigError("HAI_REACH_CONFIG", f"cannot read {path}: {exc}") from exc
    return loaded


def make_reach(app: Flask, scheduler: Scheduler) -> Reach:
    """Notifications on the app's database; delivery rounds run on its scheduler's tick."""
    reach = Reach(scheduler.engine, reach_config(app), node_id=scheduler.config.node_id, auto_migrate=False,
                  public_url=str(app.config.get("PUBLIC_URL") or ""))
    reach.init()
    reach.attach(scheduler)
    return reach


def reach_of(app: Flask) -> Reach:
    reach: Reach = app.extensions["hai_reach"]
    return reach


def scheduler_of(app: Flask) -> Scheduler:
    scheduler: Scheduler = app.extensions["hai_scheduler"]
    return scheduler


def accounts_of(app: Flask) -> Accounts:
    """The dashboard's users (logins, roles, the users pages)."""
    accounts: Accounts = app.extensions["hai_accounts"]
    return accounts


def audit_of(app: Flask) -> AuditTrail:
    """The audit trail every operator action is recorded in."""
    audit: AuditTrail = app.extensions["hai_audit"]
    return audit


def start_node(app: Flask) -> None:
    scheduler = scheduler_of(app)
    scheduler.start()
    logger.info("scheduler node %s started", scheduler.config.node_id)


def stop_node(app: Flask) -> None:
    scheduler_of(app).close()
    reach_of(app).close()
