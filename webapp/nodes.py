"""Nodes: who is alive (heartbeats) and which leases each holds right now."""

from __future__ import annotations

from collections import defaultdict

from flask import Blueprint, current_app, g, render_template
from flask.typing import ResponseReturnValue

from webapp.node import reach_of, scheduler_of

bp = Blueprint("nodes", __name__, url_prefix="/nodes")


@bp.get("/")
def index() -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    leases = defaultdict(list)
    for execution in scheduler.execution.leases(g.user.access.scope()):
        leases[execution.owner_node or "?"].append(execution)
    return render_template("nodes/index.html", nodes=scheduler.nodes(), leases=leases,
                           cluster=reach_of(current_app).alerts.watch_idle(),
                           now_ms=scheduler.execution.now_ms())
