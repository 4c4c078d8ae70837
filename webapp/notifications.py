"""Notifications: the delivery queue, dead letters (single and exact bulk requeue), unknown
deliveries, templates, providers -- all through ``reach.queue`` / ``reach.templates``, safe
metadata only. Bulk requeue: docs/semantics.md (C5). A team member sees and settles only their
teams' messages (``delivery_for``; docs/teams.md); templates and providers are every team's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ReachConfigError, ReachError, TemplateNotFoundError
from scheduler_core.reach import Reach
from scheduler_core.reach.queue import FAILURE_CLASSES, QUEUE_STATUSES, BulkPreview
from scheduler_core.reach.templates import parse_values
from scheduler_core.statuses import DeliveryResolution, QueueStatus
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version, review_errors, whole_number
from webapp.htmx import error_status, page_or_fragment, wants_fragment
from webapp.node import reach_of
from webapp.team_scope import audit_team, delivery_for

bp = Blueprint("notifications", __name__, url_prefix="/notifications")
PAGE = 50
COUNT_CAP = 10_000  # counts above this show as "10000+": each status is a bounded index scan
CONFLICT = ("changed since the page was loaded (someone else may have acted on it). "
            "Nothing was changed; review it again.")


def _reach() -> Reach:
    return reach_of(current_app)


def _arg(name: str) -> str | None:
    return request.args.get(name, "").strip() or None


def _held_label(zone: str) -> Callable[[int], dict[str, str]]:
    """"held until HH:MM" in the DND window's timezone, and the full UTC time for the hover."""

    def label(ms: int) -> dict[str, str]:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
        return {"wall": moment.astimezone(ZoneInfo(zone)).strftime("%H:%M"), "zone": zone,
                "utc": moment.strftime("%Y-%m-%d %H:%M:%S UTC")}

    return label


# --- the queue ------------------------------------------------------------------------------


def _counts() -> dict[str, int]:
    return _reach().queue.counts(cap=COUNT_CAP, scope=g.user.access.scope())


@bp.get("/")
def index() -> ResponseReturnValue:
    status = request.args.get("status") or QueueStatus.PENDING
    page = _reach().queue.browse(status, limit=PAGE, after=_arg("after"), scope=g.user.access.scope())
    held = _held_label(str(_reach().config["dnd"]["timezone"]))
    return render_template(page_or_fragment("notifications/index.html", "notifications/_rows.html"), status=status,
                           page=page, counts=_counts(), statuses=QUEUE_STATUSES, cap=COUNT_CAP, held=held)


@bp.get("/counts")
def counts() -> ResponseReturnValue:
    """The counts alone for the 5-second refresh; opened directly, the queue page that holds them."""
    if not wants_fragment():
        return redirect(url_for("notifications.index", status=request.args.get("status") or None))
    return render_template("notifications/_counts.html", counts=_counts(), statuses=QUEUE_STATUSES, cap=COUNT_CAP,
                           status=request.args.get("status") or QueueStatus.PENDING)


# --- dead letters ------------------------------------------------------------------------------


def _dead_filters() -> dict[str, str | None]:
    return {"provider": _arg("provider"), "failure": _arg("failure"), "template": _arg("template")}


def _dead_page(errors: dict[str, dict[str, str]] | None = None, after: str | None = None) -> str:
    filters = _dead_filters()
    page = _reach().queue.browse(QueueStatus.DEAD, limit=PAGE, after=after, scope=g.user.access.scope(), **filters)
    return render_template(page_or_fragment("notifications/dead.html", "notifications/_dead_rows.html"), page=page,
                           filters=filters, errors=errors or {}, providers=_reach().provider_names(),
                           failures=FAILURE_CLASSES)


@bp.get("/dead")
def dead() -> ResponseReturnValue:
    return _dead_page(after=_arg("after"))


@bp.post("/dead/<queue_id>/requeue")
@require_role("operator")
def requeue(queue_id: str) -> ResponseReturnValue:
    queue = _reach().queue
    expected = posted_version()
    if expected is None:
        return _dead_page({queue_id: {"expected_updated_at": "The page is missing the row version; reload it."}}), 400
    try:
        before = delivery_for(g.user.access, queue_id, "operator")  # another team's: 404 as for none
        after = queue.requeue_dead(queue_id, expected, g.user.access.scope("operator"))
    except ReachConfigError as exc:
        return _dead_page({queue_id: {exc.field: exc.message}}), 400
    except ReachError:
        flash(f"Dead letter {queue_id} {CONFLICT}", "error")
        return redirect(url_for("notifications.dead")), 303
    record_action("notification.requeue", queue_id, before=_entry_audit(before, expected),
                  after={"status": after.status, "attempt_count": after.attempt_count}, team=before.team)
    flash(f"Dead letter {queue_id} requeued: it goes out in the next delivery round.", "success")
    return redirect(url_for("notifications.dead")), 303


def _entry_audit(entry: Any, expected: int | None) -> dict[str, Any]:
    """What the operator acted on (safe metadata only: never a body or recipient)."""
    if entry is None:
        return {"updated_at": expected}
    return {"status": entry.status, "provider": entry.provider, "template": entry.template,
            "last_failure": entry.last_failure, "last_error": entry.last_error, "attempt_count": entry.attempt_count,
            "updated_at": expected}


@bp.get("/dead/bulk")
def bulk_preview() -> ResponseReturnValue:
    preview = _reach().queue.preview_bulk_requeue(scope=g.user.access.scope("operator"), **_dead_filters())
    return render_template("notifications/bulk.html", preview=preview, errors={})


def _form_int(name: str) -> int:
    value = whole_number(request.form.get(name, ""))
    if value is None:
        raise ReachConfigError(name, "must be a whole number; go back to the preview and try again")
    return value


def _posted_preview() -> BulkPreview:
    """The preview as the confirmation form carries it (validated again by the core)."""
    form = request.form
    return BulkPreview(provider=form.get("provider") or None, failure=form.get("failure") or None,
                       template=form.get("template") or None, bound_at=_form_int("bound_at"),
                       bound_id=form.get("bound_id") or None, count=_form_int("count"))


@bp.post("/dead/bulk")
@require_role("operator")
def bulk_requeue() -> ResponseReturnValue:
    scope = g.user.access.scope("operator")
    try:
        preview = _posted_preview()
        result = _reach().queue.bulk_requeue(preview, scope)
    except ReachConfigError as exc:
        shown = BulkPreview(request.form.get("provider") or None, request.form.get("failure") or None,
                            request.form.get("template") or None, 0, None, 0)
        return render_template("notifications/bulk.html", preview=shown, errors={exc.field: exc.message}), 400
    filters = {"provider": preview.provider, "failure": preview.failure, "template": preview.template}
    record_action("notification.bulk_requeue", "dead letters",
                  before={"filter": filters, "bound_at": preview.bound_at, "bound_id": preview.bound_id,
                          "previewed": preview.count},
                  after={"requeued": result.requeued, "changed": result.changed}, team=audit_team(scope))
    message = f"Requeued {result.requeued} of the {result.previewed} previewed dead letters."
    if result.changed:
        message += f" {result.changed} had changed since the preview and were left as they are."
    flash(message, "success" if not result.changed else "warning")
    query: dict[str, Any] = {key: value for key, value in filters.items() if value}
    return redirect(url_for("notifications.dead", **query)), 303


# --- unknown deliveries ----------------------------------------------------------------------------


def _unknown_page(errors: dict[str, dict[str, str]] | None = None) -> str:
    page = _reach().queue.browse(QueueStatus.UNKNOWN, limit=PAGE, after=_arg("after"), scope=g.user.access.scope())
    return render_template("notifications/unknown.html", page=page, errors=errors or {})


@bp.get("/unknown")
def unknown() -> ResponseReturnValue:
    return _unknown_page()


def _resolution_errors(status: str, reason: str, message_id: str | None, expected: int | None) -> dict[str, str]:
    errors = review_errors(status, tuple(DeliveryResolution), reason, expected)
    if status == DeliveryResolution.DISCARDED and message_id:
        errors["message_id"] = "A message id only goes with \"sent\"."
    if message_id is not None and len(message_id) > 255:
        errors["message_id"] = "Keep the message id under 256 characters."
    return errors


@bp.post("/unknown/<queue_id>/resolve")
@require_role("operator")
def resolve(queue_id: str) -> ResponseReturnValue:
    status = request.form.get("status", "")
    reason = request.form.get("reason", "").strip()
    message_id = request.form.get("message_id", "").strip() or None
    expected = posted_version()
    errors = _resolution_errors(status, reason, message_id, expected)
    if errors:
        return _unknown_page({queue_id: errors}), 400
    queue = _reach().queue
    try:
        before = delivery_for(g.user.access, queue_id, "operator")  # another team's: 404 as for none
        after = queue.resolve_unknown(queue_id, status, message_id, g.user.name, expected,
                                      g.user.access.scope("operator"))
    except ReachConfigError as exc:
        return _unknown_page({queue_id: {exc.field: exc.message}}), 400
    except ReachError:
        flash(f"Delivery {queue_id} {CONFLICT}", "error")
        return redirect(url_for("notifications.unknown")), 303
    record_action("notification.resolve_unknown", queue_id, before=_entry_audit(before, expected),
                  after={"status": after.status, "message_id": after.message_id}, reason=reason, team=before.team)
    flash(f"Delivery {queue_id} resolved as {status}.", "success")
    return redirect(url_for("notifications.unknown")), 303


# --- templates -------------------------------------------------------------------------------------


@bp.get("/templates")
def templates() -> ResponseReturnValue:
    reach = _reach()
    return render_template("notifications/templates.html", configured=reach.configured_templates(),
                           stored=reach.templates.stored())


def _template_or_404(name: str) -> Any:
    try:
        return _reach().templates.get(name)
    except TemplateNotFoundError:
        abort(404, f"Template {name!r} not found.")


@bp.get("/templates/show/<path:name>")
def template(name: str) -> ResponseReturnValue:
    """A template, and a preview of its rendering with the variables typed in (``vars``)."""
    found = _template_or_404(name)
    typed = request.args.get("vars")
    preview, error = None, None
    if typed is not None:
        try:
            preview = _reach().templates.check(name, parse_values(typed))
        except ReachConfigError as exc:
            error = exc.message if exc.field == "vars" else f"{exc.field.removeprefix('vars.')}: {exc.message}"
    stored = _reach().templates.stored_one(name)
    configured = any(t.name == name for t in _reach().configured_templates())
    status = error_status() if error else 200
    return render_template(page_or_fragment("notifications/template.html", "notifications/_preview.html"),
                           template=found, stored=None if configured else stored, typed=typed or "", preview=preview,
                           vars_error=error), status


def _template_form(mode: str, values: dict[str, Any], errors: dict[str, str], status: int = 200) -> ResponseReturnValue:
    return render_template("notifications/template_form.html", mode=mode, values=values, errors=errors,
                           providers=_reach().provider_names()), status


def _posted_template() -> dict[str, Any]:
    form = request.form
    return {"name": form.get("name", "").strip(), "provider": form.get("provider", ""),
            "subject": form.get("subject", "").strip() or None, "body": form.get("body", "").replace("\r\n", "\n")}


@bp.get("/templates/new")
@require_role("admin", globally=True)
def new_template() -> ResponseReturnValue:
    return _template_form("create", {"name": "", "provider": "", "subject": None, "body": ""}, {})


@bp.post("/templates/new")
@require_role("admin", globally=True)
def create_template() -> ResponseReturnValue:
    values = _posted_template()
    try:
        saved = _reach().templates.create(values["name"], values["provider"], values["body"], values["subject"])
    except ReachConfigError as exc:
        return _template_form("create", values, {exc.field: exc.message}, 400)
    record_action("template.save", saved.name, before=None, after=_template_audit(saved))
    flash(f"Template {saved.name} created.", "success")
    return redirect(url_for("notifications.template", name=saved.name)), 303


def _stored_or_404(name: str) -> Any:
    stored = _reach().templates.stored_one(name)
    if stored is None or any(t.name == name for t in _reach().configured_templates()):
        abort(404, f"No stored template named {name!r} (configured templates are read-only).")
    return stored


@bp.get("/templates/edit/<path:name>")
@require_role("admin", globally=True)
def edit_template(name: str) -> ResponseReturnValue:
    stored = _stored_or_404(name)
    return _template_form("edit", {**_template_audit(stored), "updated_at": stored.updated_at}, {})


@bp.post("/templates/edit/<path:name>")
@require_role("admin", globally=True)
def update_template(name: str) -> ResponseReturnValue:
    before = _stored_or_404(name)
    values = {**_posted_template(), "name": name, "updated_at": request.form.get("expected_updated_at", "")}
    expected = posted_version()
    if expected is None:
        return _template_form("edit", values, {"expected_updated_at": "The page is missing the version; reload it."},
                              400)
    try:
        saved = _reach().templates.update(name, values["provider"], values["body"], values["subject"], expected)
    except ReachConfigError as exc:
        return _template_form("edit", values, {exc.field: exc.message}, 400)
    except ReachError:
        flash(f"Template {name} {CONFLICT}", "error")
        return redirect(url_for("notifications.edit_template", name=name)), 303
    record_action("template.save", name, before=_template_audit(before), after=_template_audit(saved))
    flash(f"Template {name} saved.", "success")
    return redirect(url_for("notifications.template", name=name)), 303


@bp.post("/templates/delete/<path:name>")
@require_role("admin", globally=True)
def delete_template(name: str) -> ResponseReturnValue:
    before = _stored_or_404(name)
    expected = posted_version()
    if expected is None:
        abort(400, "The page is missing the template's version; reload it.")
    try:
        _reach().templates.delete(name, expected)
    except ReachError:
        flash(f"Template {name} {CONFLICT}", "error")
        return redirect(url_for("notifications.template", name=name)), 303
    record_action("template.delete", name, before=_template_audit(before))
    flash(f"Template {name} deleted.", "success")
    return redirect(url_for("notifications.templates")), 303


def _template_audit(template: Any) -> dict[str, Any]:
    return {"name": template.name, "provider": template.provider, "subject": template.subject, "body": template.body}


# --- providers -------------------------------------------------------------------------------------


def _display(snapshot: dict[str, Any]) -> list[tuple[str, Any]]:
    shown = []
    for key, value in snapshot.items():
        if key in ("name", "type"):
            continue
        shown.append((key, value))
    return shown


@bp.get("/providers")
def providers() -> ResponseReturnValue:
    reach = _reach()
    listed = [(s["name"], s["type"], _display(s)) for s in reach.provider_snapshots()]
    return render_template("notifications/providers.html", providers=listed, dnd=reach.config["dnd"],
                           policy=reach.config["queue"])
