"""Executions: the journal with filters, one execution with its evidence, and the unknown
review queue (one at a time, or a filtered set in bulk after a preview count).

Resolving an unknown execution is an operator's decision: it needs a reason, carries the
row's ``updated_at`` from the page it was made on (a stale page gets a conflict message,
never an overwrite), and lands in the audit trail. A bulk resolution settles exactly the
previewed set, each row by its own compare-and-set (scheduler_core/runtime/unknown_review.py).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError, ConflictError, ExecutionNotFoundError, TaskNotFoundError
from scheduler_core.runtime.unknown_review import BulkResolvePreview
from scheduler_core.statuses import ExecutionStatus, Resolution
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version, review_errors, whole_number
from webapp.htmx import error_status, page_or_fragment, wants_fragment
from webapp.node import scheduler_of
from webapp.team_scope import audit_team

bp = Blueprint("executions", __name__, url_prefix="/executions")
PAGE = 50
FILTER_FIELDS = ("status", "task")
UNKNOWN_SHOWN = 100  # the oldest first; an error about one further down shows above the cards
RESOLUTIONS = tuple(Resolution)


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
                                  after=request.args.get("after") or None, scope=g.user.access.scope())
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
    return render_template("executions/index.html", running=execution.leases(g.user.access.scope()), **context), code


@bp.get("/running")
def running() -> ResponseReturnValue:
    """Executions running now with their owner and lease (refreshed every 5 s on the list page)."""
    rows = scheduler_of(current_app).execution.leases(g.user.access.scope())
    return render_template(page_or_fragment("executions/running.html", "executions/_running.html"), running=rows)


@bp.get("/view/<occurrence_id>")
def detail(occurrence_id: str) -> ResponseReturnValue:
    """One execution: what it was, and the evidence of every attempt."""
    scheduler = scheduler_of(current_app)
    try:
        execution = scheduler.execution.get(occurrence_id, g.user.access.scope())
    except (ExecutionNotFoundError, ConfigError):
        abort(404, description=f"No execution {occurrence_id!r} in the journal.")
    holder = None
    if execution.status == ExecutionStatus.UNKNOWN:
        try:
            holder = scheduler.task_ops.state(execution.task_id).blocked_by
        except TaskNotFoundError:  # the task was deleted since: its slot went with it
            holder = None
    return render_template("executions/detail.html", e=execution, holds_slot=holder == execution.occurrence_id)


def _review_filters() -> dict[str, str | None]:
    return {"task": (request.values.get("task") or "").strip() or None,
            "cause": (request.values.get("cause") or "").strip() or None}


def _unknown_page(errors: dict[str, dict[str, str]] | None = None) -> str:
    filters = _review_filters()
    try:
        rows = scheduler_of(current_app).execution.unknown(filters["task"], filters["cause"], UNKNOWN_SHOWN,
                                                           g.user.access.scope())
    except ConfigError as exc:
        rows, errors = [], {**(errors or {}), "filter": _field_error(exc)}
        g.review_filter_refused = True
    query = {key: value for key, value in filters.items() if value}
    return render_template("executions/unknown.html", rows=rows, errors=errors or {}, filters=filters, query=query)


@bp.get("/unknown")
def unknown() -> ResponseReturnValue:
    page = _unknown_page()
    return page, 400 if g.get("review_filter_refused") else 200


@bp.get("/unknown/bulk")
def bulk_preview() -> ResponseReturnValue:
    """How many unknown executions of the filter a bulk resolution would settle, and the form to do it."""
    filters = _review_filters()
    try:
        preview = scheduler_of(current_app).execution.preview_bulk_resolve(  # what this user may resolve
            filters["task"], filters["cause"], g.user.access.scope("operator"))
    except ConfigError as exc:
        return _bulk_page(BulkResolvePreview(None, None, 0, None, 0), _field_error(exc), filters), 400
    return _bulk_page(preview, {}, filters)


def _bulk_page(preview: BulkResolvePreview, errors: dict[str, str], filters: dict[str, str | None]) -> str:
    query = {key: value for key, value in filters.items() if value}
    return render_template("executions/bulk.html", preview=preview, errors=errors, filters=filters, query=query)


def _field_error(exc: ConfigError) -> dict[str, str]:
    return {exc.field: exc.message.removeprefix(f"{exc.field}: ")}


def _posted_bulk() -> BulkResolvePreview:
    """The preview as the confirmation form carries it (validated again by the core)."""
    numbers = {}
    for name in ("bound_at", "count"):
        value = whole_number(request.form.get(name, ""))
        if value is None:
            raise ConfigError(name, "must be a whole number; go back to the preview and try again")
        numbers[name] = value
    filters = _review_filters()
    return BulkResolvePreview(filters["task"], filters["cause"], numbers["bound_at"],
                              request.form.get("bound_id") or None, numbers["count"])


@bp.post("/unknown/bulk")
@require_role("operator")
def bulk_resolve() -> ResponseReturnValue:
    filters = _review_filters()
    status = request.form.get("status", "")
    reason = request.form.get("reason", "").strip()
    errors = {}
    if status not in RESOLUTIONS:
        errors["status"] = f"Choose {' or '.join(RESOLUTIONS)}."
    if not reason:
        errors["reason"] = "A reason is required: say what you checked."
    try:
        preview = _posted_bulk()
    except ConfigError as exc:
        errors.update(_field_error(exc))
        preview = BulkResolvePreview(filters["task"], filters["cause"], 0, None, 0)
    if errors:
        return _bulk_page(preview, errors, filters), 400
    try:
        result = scheduler_of(current_app).execution.bulk_resolve(preview, status, g.user.name, reason,
                                                                  g.user.access.scope("operator"))
    except ConfigError as exc:
        return _bulk_page(preview, _field_error(exc), filters), 400
    record_action("execution.bulk_resolve_unknown", "unknown executions",
                  before={"filter": {"task": preview.task_id, "cause": preview.reason},
                          "status": ExecutionStatus.UNKNOWN, "bound_at": preview.bound_at, "bound_id": preview.bound_id,
                          "previewed": preview.count},
                  after={"status": status, "resolved": result.resolved, "changed": result.changed,
                         "occurrences": list(result.resolved_ids[:100])}, reason=reason,
                  team=audit_team(g.user.access.scope("operator")))
    message = f"Resolved {result.resolved} of the {result.previewed} previewed unknown executions as {status}."
    if result.changed:
        message += (f" {result.changed} had changed since the preview (resolved by someone else) and were left"
                    " as they are.")
    flash(message, "success" if not result.changed else "warning")
    shown: dict[str, Any] = {k: v for k, v in filters.items() if v}
    return redirect(url_for("executions.unknown", **shown)), 303


@bp.post("/<occurrence_id>/resolve")
@require_role("operator")
def resolve(occurrence_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    status = request.form.get("status", "")
    reason = request.form.get("reason", "").strip()
    expected = posted_version()
    errors = review_errors(status, RESOLUTIONS, reason, expected)
    if errors:  # read nothing yet: the same answer for another team's row as for none
        return _unknown_page({occurrence_id: errors}), 400
    before = scheduler.execution.get(occurrence_id, g.user.access.scope())  # another team's: not found
    try:
        after = scheduler.execution.resolve_unknown(occurrence_id, status, expected or 0, g.user.name, reason,
                                                    g.user.access.scope("operator"))
    except ExecutionNotFoundError:  # seen, but not an operator of its team
        abort(403, description="Resolving this execution needs the operator role in its task's team.")
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
