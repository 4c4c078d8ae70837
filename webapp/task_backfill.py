"""The backfill page (``/tasks/backfill/<id>``, operators): a range of a task's past fire times,
typed as wall times in the task's zone (or another one), previewed -- how many fire times the
range holds, the first and the last, how many would run and how many ran already -- and queued
(``Scheduler.backfill``; the core audits it as ``task.backfill`` in the transaction that queues
the runs). The preview is a dry run: a plain "Preview" button, and with JavaScript it follows
the fields as they change (the fragment ``tasks/_backfill_preview.html``)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from flask import Blueprint, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.cron import validate_timezone
from scheduler_core.errors import ConfigError
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.backfill import BACKFILL_MAX, REASON_MAX, BackfillResult
from webapp.auth import require_role
from webapp.htmx import shown_again, wants_fragment
from webapp.node import scheduler_of
from webapp.team_scope import task_for
from webapp.timefmt import wall_ms

bp = Blueprint("backfill", __name__, url_prefix="/tasks")
FIELDS = ("start", "end", "tz", "reason")
_FORM_FIELD = {"start_ms": "start", "end_ms": "end", "reason": "reason", "task_id": "start"}


@bp.get("/backfill/<path:task_id>")
@require_role("operator")
def form(task_id: str) -> ResponseReturnValue:
    task = task_for(g.user.access, task_id, "operator")
    return _page(task, {}, {"tz": task.timezone}, None)


@bp.post("/backfill/<path:task_id>")
@require_role("operator")
def submit(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    task = task_for(g.user.access, task_id, "operator")
    typed = {name: request.form.get(name, "").strip() for name in FIELDS}
    action = request.form.get("action", "")
    if action not in ("preview", "queue"):  # the form's two buttons (and its live preview) say which
        return shown_again(_page(task, {"start": "Press Preview or Queue the runs."}, typed, None))
    dry_run = action == "preview"
    start, end, errors = _range(typed, task)
    result = None
    if not errors:
        try:
            result = scheduler.backfill(task.id, start, end, by=g.user.name, reason=typed["reason"] or None,
                                        dry_run=dry_run)
        except ConfigError as exc:
            field = _FORM_FIELD.get(exc.field or "", "start")
            errors = {field: exc.message.removeprefix(f"{exc.field}: ")}
    if errors:
        return shown_again(_page(task, errors, typed, None))
    assert result is not None
    if dry_run:
        return _page(task, {}, typed, result)
    if result.queued:
        flash(f"Task {task.id}: {result.queued} past run{'' if result.queued == 1 else 's'} queued "
              f"({result.new} new, {result.again} missed or skipped before); {result.already} ran or wait already "
              "and are left as they are. They run one at a time, in minute order.", "success")
    else:
        flash(f"Task {task.id}: nothing queued; the range's {result.count} fire time"
              f"{'' if result.count == 1 else 's'} ran or wait already.", "info")
    return redirect(url_for("tasks.detail", task_id=task.id), 303)


def _range(typed: dict[str, str], task: TaskDefinition) -> tuple[int, int, dict[str, str]]:
    """The typed range as unix ms, read in the typed zone (the task's when empty); or the errors."""
    try:
        zone = ZoneInfo(validate_timezone(typed["tz"] or task.timezone))
    except ConfigError:
        return 0, 0, {"tz": "Not an IANA time zone name; use one such as Europe/Berlin or UTC."}
    found, errors = [], {}
    for name in ("start", "end"):
        if not typed[name]:
            errors[name] = "Pick a date and time."
            continue
        try:
            found.append(wall_ms(typed[name], zone))
        except (ValueError, OverflowError):
            errors[name] = "Not a date and time; pick one, or type it as 2026-12-07T09:00."
    if errors:
        return 0, 0, errors
    return found[0], found[1], {}


def _page(task: TaskDefinition, errors: dict[str, str], typed: dict[str, str], result: BackfillResult | None) -> str:
    context = {"task": task, "errors": errors, "typed": typed, "result": result,
               "backfill_max": BACKFILL_MAX, "reason_max": REASON_MAX}
    if wants_fragment():
        return render_template("tasks/_backfill_preview.html", **context)
    return render_template("tasks/backfill.html", **context)
