"""Executions: the journal with filters, and the unknown review queue.

Resolving an unknown execution is an operator's decision: it needs a reason, carries the
row's ``updated_at`` from the page it was made on (a stale page gets a conflict message,
never an overwrite), and lands in the audit trail.
"""

from __future__ import annotations

from flask import Blueprint, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.statuses import ExecutionStatus
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version, review_errors
from webapp.htmx import error_status, page_or_fragment, wants_fragment
from webapp.node import scheduler_of

bp = Blueprint("executions", __name__, url_prefix="/executions")
PAGE = 50
FILTER_FIELDS = ("status", "task")
UNKNOWN_SHOWN = 100  # the oldest first; an error about one further down shows above the cards
RESOLUTIONS = ("success", "discarded")


def _filters() -> tuple[str | None, str | None, dict[str, str]]:
    status = request.args.get("status") or None
    task_id = (request.args.get("task") or "").strip() or None
    errors = {}
    if status is not None and status not in tuple(ExecutionStatus):
        errors["status"] = f"Choose one of {', '.join(tuple(ExecutionStatus))}."
    if task_id is not None and len(task_id) > 128:
        errors["task"] = "At most 128 characters."
    return status, task_id, errors


@bp.get("/")
def index() -> ResponseReturnValue:
    """The journal newest first, one keyset page (``before`` / ``after`` cursors), filtered."""
    status, task_id, errors = _filters()
    execution = scheduler_of(current_app).execution
    page = None
    if not errors:
        try:
            page = execution.page(status, task_id, PAGE, before=request.args.get("before") or None,
                                  after=request.args.get("after") or None)
        except ConfigError as exc:
            errors[exc.field] = exc.message
    fragment = wants_fragment()
    link_args = {name: value for name, value in (("status", status), ("task", task_id)) if value}
    context = {"page": page, "status": status, "task": task_id, "statuses": tuple(ExecutionStatus), "errors": errors,
               "link_args": link_args, "fragment": fragment,
               "general_errors": [m for f, m in errors.items() if f not in FILTER_FIELDS]}
    code = error_status() if errors else 200  # a fragment shows its errors itself
    if fragment:
        return render_template("executions/_rows.html", **context), code
    return render_template("executions/index.html", running=execution.leases(), **context), code


@bp.get("/running")
def running() -> ResponseReturnValue:
    """Executions running now with their owner and lease (refreshed every 5 s on the list page)."""
    rows = scheduler_of(current_app).execution.leases()
    return render_template(page_or_fragment("executions/running.html", "executions/_running.html"), running=rows)


def _unknown_page(errors: dict[str, dict[str, str]] | None = None) -> str:
    rows = scheduler_of(current_app).execution.list_unknown(UNKNOWN_SHOWN, 0)
    return render_template("executions/unknown.html", rows=rows, errors=errors or {})


@bp.get("/unknown")
def unknown() -> ResponseReturnValue:
    return _unknown_page()


@bp.post("/<occurrence_id>/resolve")
@require_role("operator")
def resolve(occurrence_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    status = request.form.get("status", "")
    reason = request.form.get("reason", "").strip()
    expected = posted_version()
    errors = review_errors(status, RESOLUTIONS, reason, expected)
    if errors:
        return _unknown_page({occurrence_id: errors}), 400
    before = scheduler.execution.get(occurrence_id)
    try:
        after = scheduler.execution.resolve_unknown(occurrence_id, status, expected or 0, g.user.name, reason)
    except ConflictError:
        flash("This execution changed since the page was loaded (someone else may have resolved it). "
              "Nothing was changed; review it again.", "error")
        return redirect(url_for("executions.unknown")), 303
    except ConfigError as exc:
        return _unknown_page({occurrence_id: {exc.field: exc.message}}), 400
    record_action("execution.resolve_unknown", occurrence_id, before={"status": before.status},
                  after={"status": after.status}, reason=reason)
    flash(f"Execution {occurrence_id} resolved as {status}.", "success")
    return redirect(url_for("executions.unknown")), 303
