"""Executions: the journal with filters, and the unknown review queue.

Resolving an unknown execution is an operator's decision: it needs a reason, carries the
row's ``updated_at`` from the page it was made on (a stale page gets a conflict message,
never an overwrite), and lands in the audit trail.
"""

from __future__ import annotations

from flask import Blueprint, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.runtime.operations import EXECUTION_STATUSES
from webapp.auth import require_role
from webapp.node import scheduler_of

bp = Blueprint("executions", __name__, url_prefix="/executions")
PAGE = 50


@bp.get("/")
def index() -> ResponseReturnValue:
    status = request.args.get("status") or None
    task_id = request.args.get("task") or None
    page = max(0, request.args.get("page", 0, type=int))
    if status not in (None, *EXECUTION_STATUSES):
        status = None
    rows = scheduler_of(current_app).execution.recent(status, task_id, PAGE, page * PAGE)
    template = "executions_rows.html" if request.headers.get("HX-Request") else "executions.html"
    return render_template(template, rows=rows, status=status, task=task_id, page=page, page_size=PAGE,
                           statuses=EXECUTION_STATUSES)


@bp.get("/unknown")
def unknown() -> ResponseReturnValue:
    rows = scheduler_of(current_app).execution.list_unknown(100, 0)
    return render_template("unknown.html", rows=rows, errors={})


@bp.post("/<occurrence_id>/resolve")
@require_role("operator")
def resolve(occurrence_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    status = request.form.get("status", "")
    reason = request.form.get("reason", "").strip()
    expected = request.form.get("expected_updated_at", type=int)
    errors = _resolution_errors(status, reason, expected)
    if errors:
        rows = scheduler.execution.list_unknown(100, 0)
        return render_template("unknown.html", rows=rows, errors={occurrence_id: errors}), 400
    before = scheduler.execution.get(occurrence_id)
    try:
        after = scheduler.execution.resolve_unknown(occurrence_id, status, expected or 0, g.user.name, reason)
    except ConflictError:
        flash("This execution changed since the page was loaded (someone else may have resolved it). "
              "Nothing was changed; review it again.", "error")
        return redirect(url_for("executions.unknown")), 303
    except ConfigError as exc:
        return render_template("unknown.html", rows=scheduler.execution.list_unknown(100, 0),
                               errors={occurrence_id: {exc.field: exc.message}}), 400
    scheduler.audit.record(
        g.user.name, "execution.resolve_unknown", occurrence_id, before={"status": before.status},
        after={"status": after.status}, reason=reason)
    flash(f"Execution {occurrence_id} resolved as {status}.", "success")
    return redirect(url_for("executions.unknown")), 303


def _resolution_errors(status: str, reason: str, expected: int | None) -> dict[str, str]:
    errors = {}
    if status not in ("success", "discarded"):
        errors["status"] = "Choose success or discarded."
    if not reason:
        errors["reason"] = "A reason is required: say what you checked."
    elif len(reason) > 2000:
        errors["reason"] = "Keep the reason under 2000 characters."
    if expected is None:
        errors["expected_updated_at"] = "The page is missing the row version; reload it."
    return errors
