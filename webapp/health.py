"""``/healthz``: answers without login; 200 when the database answers and the schema is current.

It is also the dashboard's look at the cluster: ``cluster.idle_s`` says how long no node has
planned (whole minutes, 0 while nodes tick), and a ``cluster.idle`` alert rule fires from here
while the whole cluster is down (``Alerts.watch_idle``), so an outage alerts before a node is back.
The answer stays 200 then: the dashboard is healthy, the nodes are not, and a load balancer must
keep the page that says so in rotation. While the database does not answer (a failover: seconds
without a primary) it is 503 with ``database: unreachable since <UTC time>``, said once in the log
when it starts and once when it ends (the scheduler's ``outage``, one per worker process, which
the node in the same process reports to as well).
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from scheduler_core.db import health_check, migration_state
from scheduler_core.db.outage import utc as _utc
from scheduler_core.errors import ReachError, SchedulerError
from webapp.node import reach_of, scheduler_of

bp = Blueprint("health", __name__)
logger = logging.getLogger("webapp.health")


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    engine = current_app.extensions["hai_engine"]
    outage = scheduler_of(current_app).outage  # the node in this process reports to it too
    try:
        now_ms = health_check(engine)
        state = migration_state(engine)
    except SchedulerError as exc:
        since = outage.failed(exc)
        return jsonify(status="unavailable", error=exc.code, database=f"unreachable since {_utc(since)}",
                       unreachable_since_ms=int(since * 1000)), 503
    outage.answered()
    status = "ok" if state.up_to_date else "migrations_pending"
    answer = {"status": status, "database_clock_ms": now_ms, "schema": state.current}
    if state.up_to_date:
        answer["cluster"] = _cluster()
        answer["database_clock_jumps"] = _clock_jumps(now_ms)
    return jsonify(answer), 200 if state.up_to_date else 503


CLOCK_JUMPS_SHOWN_MS = 3_600_000


def _clock_jumps(now_ms: int) -> list[dict[str, Any]]:
    """The database clock jumps nodes saw in the last hour (runtime/clock_watch.py), newest first:
    after a failover, whether the new primary's clock differs from the old one's, and by how much."""
    try:
        seen = scheduler_of(current_app).nodes()
    except SchedulerError:
        logger.warning("reading the nodes' clock jumps failed", exc_info=True)
        return []
    recent = [n for n in seen if n.clock_jump_at is not None and n.clock_jump_at >= now_ms - CLOCK_JUMPS_SHOWN_MS]
    return [{"node_id": n.node_id, "jump_ms": n.clock_jump_ms, "at_ms": n.clock_jump_at}
            for n in sorted(recent, key=lambda n: n.clock_jump_at or 0, reverse=True)]


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
