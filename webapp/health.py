"""``/healthz``: answers without login; 200 when the database answers and the schema is current.

It is also the dashboard's look at the cluster: ``cluster.idle_s`` says how long no node has
planned (whole minutes, 0 while nodes tick), and a ``cluster.idle`` alert rule fires from here
while the whole cluster is down (``Alerts.watch_idle``), so an outage alerts before a node is back.
The answer stays 200 then: the dashboard is healthy, the nodes are not, and a load balancer must
keep the page that says so in rotation.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from scheduler_core.db import health_check, migration_state
from scheduler_core.errors import ReachError, SchedulerError
from webapp.node import reach_of

bp = Blueprint("health", __name__)
logger = logging.getLogger("webapp.health")


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    engine = current_app.extensions["hai_engine"]
    try:
        now_ms = health_check(engine)
        state = migration_state(engine)
    except SchedulerError as exc:
        return jsonify(status="unavailable", error=exc.code), 503
    status = "ok" if state.up_to_date else "migrations_pending"
    answer = {"status": status, "database_clock_ms": now_ms, "schema": state.current}
    if state.up_to_date:
        answer["cluster"] = _cluster()
    return jsonify(answer), 200 if state.up_to_date else 503


def _cluster() -> dict[str, Any]:
    try:
        idle = reach_of(current_app).alerts.watch_idle()
    except (SchedulerError, ReachError):
        logger.warning("the cluster's idle check failed", exc_info=True)
        return {"state": "unknown"}
    if not idle.ticked_through:
        return {"state": "no_node_yet", "ticked_through_ms": None, "idle_s": None}
    return {"state": "idle" if idle.idle_ms else "ticking", "ticked_through_ms": idle.ticked_through,
            "idle_s": idle.idle_ms // 1000}
