"""The overview page: what needs an operator's attention, at a glance."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template
from flask.typing import ResponseReturnValue

from webapp.node import scheduler_of

bp = Blueprint("overview", __name__)


@bp.get("/")
def index() -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    return render_template("overview.html", counts=scheduler.execution.counts(), tasks=len(scheduler.refresh_tasks()),
                           log_failures=len(scheduler.execution.list_log_failures(100, 0)), nodes=scheduler.nodes())
