"""The overview page: what needs an operator's attention, at a glance."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template
from flask.typing import ResponseReturnValue

from scheduler_core.store import ExecutionRepository, NodeRepository, TaskRepository

bp = Blueprint("overview", __name__)


@bp.get("/")
def index() -> ResponseReturnValue:
    engine = current_app.extensions["hai_engine"]
    executions = ExecutionRepository(engine, "dashboard", 1000)
    counts = executions.count_by_status()
    return render_template("overview.html", counts=counts, tasks=TaskRepository(engine).count(),
                           log_failures=len(executions.list_log_failures(100, 0)),
                           nodes=NodeRepository(engine).list())
