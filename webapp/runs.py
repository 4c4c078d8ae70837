"""Run history at a glance: the last occurrences of each task as a grid (rows: tasks, columns:
runs, newest right), coloured by outcome and lettered so it reads without colour, each cell a
link to its execution. Paged over tasks by id with the Tasks page's search; two statements a
page (``scheduler.task_ops.grid``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, g, render_template, request
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.task_operations import SEARCH_FIELDS, SEARCH_STATUSES
from scheduler_core.statuses import ExecutionStatus
from webapp.htmx import shown_again, wants_fragment
from webapp.node import scheduler_of

bp = Blueprint("runs", __name__, url_prefix="/runs")
TASKS_PER_PAGE = 50
RUNS = 20

# A letter per status: the grid reads without colour (and the legend says which is which).
LETTERS = {ExecutionStatus.SUCCESS: "S", ExecutionStatus.FAILED: "F", ExecutionStatus.UNKNOWN: "U",
           ExecutionStatus.INTERRUPTED: "I", ExecutionStatus.DISCARDED: "D", ExecutionStatus.SKIPPED: "K",
           ExecutionStatus.MISSED: "M", ExecutionStatus.RUNNING: "R", ExecutionStatus.QUEUED: "Q"}


@bp.get("/")
def index() -> ResponseReturnValue:
    query = request.args.get("q", "")
    context: dict[str, Any] = {"q": query, "fields": SEARCH_FIELDS, "statuses": SEARCH_STATUSES, "letters": LETTERS,
                               "runs": RUNS}
    try:
        grid = scheduler_of(current_app).task_ops.grid(query, TASKS_PER_PAGE, RUNS,
                                                       after=request.args.get("after") or None,
                                                       before=request.args.get("before") or None,
                                                       scope=g.user.access.scope())
    except ConfigError as exc:
        context.update(grid=None, error=exc.message.removeprefix(f"{exc.field}: "))
        return shown_again(render_template("runs/_grid.html" if wants_fragment() else "runs/index.html", **context))
    context.update(grid=grid, error=None)
    return render_template("runs/_grid.html" if wants_fragment() else "runs/index.html", **context)
