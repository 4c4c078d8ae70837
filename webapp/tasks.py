"""Tasks: search and keyset list, create / edit forms (api and hook; code tasks read-only),
enable / disable / delete (compare-and-set), trigger and rerun, detail with history. Every
action is audited with masked before / after.

URLs put the action before the task id (``/tasks/edit/<id>``, ``/tasks/view/<id>``): an id may
hold ``/`` and any word, so ``new``, ``cron-preview`` or ``x/edit`` each still name one page.
Only ids with an empty, ``.`` or ``..`` segment cannot be carried by a URL; the core refuses
them for new tasks (``check_id(..., url_path=True)``).

Here are the routes (what each request does) and the template filters; how each page is drawn
(the form with its schedule preview, the detail page) is in ``webapp/task_pages.py``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.cron import describe
from scheduler_core.errors import (
    ConfigError,
    ConflictError,
    ExecutionNotFoundError,
    InvalidCronError,
    TaskAlreadyExistsError,
)
from scheduler_core.model import UPDATABLE_FIELDS
from scheduler_core.runtime.task_operations import SEARCH_FIELDS, SEARCH_STATUSES
from scheduler_core.statuses import ExecutionStatus
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.forms import posted_version
from webapp.htmx import wants_fragment
from webapp.node import scheduler_of
from webapp.pause_form import pause_end
from webapp.task_form import CODE_KINDS, CODE_REFUSED, TaskForm
from webapp.task_pages import HISTORY_PAGE, log_links, render_detail, render_form, schedule_preview, search_error
from webapp.team_scope import check_placement, repeated_key, task_for, team_choices

bp = Blueprint("tasks", __name__, url_prefix="/tasks")
PAGE = 50
CONFLICT = ("This task changed since the page was loaded (someone else may have edited it). "
            "Nothing was changed; review it again.")


# --- display helpers -------------------------------------------------------------------------


@bp.app_template_filter("zoned")
def zoned(ms: int | None, zone: str = "UTC") -> str:
    """Unix ms as wall-clock time in ``zone`` (the task's zone, not the viewer's)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


@bp.app_template_filter("utc")
def utc(ms: int | None) -> str:
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


@bp.app_template_filter("duration_ms")
def duration_ms(ms: int) -> str:
    """``3600000`` as ``1 h``, ``5400000`` as ``1 h 30 min``, ``0`` as ``0 min``, in whole units."""
    minutes, rest = divmod(ms, 60_000)
    if rest or not minutes:
        return f"{ms / 1000:g} s" if ms else "0 min"
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}" if days else "", f"{hours} h" if hours else "",
             f"{minutes} min" if minutes else ""]
    return " ".join(part for part in parts if part)


@bp.app_template_filter("cron_text")
def cron_text(expr: str) -> str:
    try:
        return describe(expr)
    except InvalidCronError:
        return ""


def _audit(action: str, target: str, before: Any = None, after: Any = None, reason: str | None = None,
           team: str | None = None) -> None:
    record_action(action, target, before=before, after=after, reason=reason, team=team)


# --- list ---------------------------------------------------------------------------------


@bp.get("/")
def index() -> ResponseReturnValue:
    query = request.args.get("q", "")
    after = request.args.get("after") or None
    before = request.args.get("before") or None
    context: dict[str, Any] = {"q": query, "fields": SEARCH_FIELDS, "statuses": SEARCH_STATUSES}
    try:
        page = scheduler_of(current_app).task_ops.search(query, PAGE, after=after, before=before,
                                                         scope=g.user.access.scope())
    except ConfigError as exc:
        return search_error(context, exc)
    context.update(page=page, error=None)
    if wants_fragment():
        return render_template("tasks/_rows.html", oob=True, **context)
    return render_template("tasks/index.html", **context)


# --- cron preview ------------------------------------------------------------------------------


@bp.get("/cron-preview")
def cron_preview() -> ResponseReturnValue:
    """What a schedule being typed means (an HTMX fragment of the form; opened directly, a page)."""
    template = "tasks/_cron_preview.html" if wants_fragment() else "tasks/cron_preview.html"
    return render_template(template, **schedule_preview(request.args.get("cron", ""), request.args.get("timezone", ""),
                                                        request.args))


# --- create / edit ------------------------------------------------------------------------------


@bp.get("/new")
@require_role("admin")
def new() -> ResponseReturnValue:
    form, teams = TaskForm.blank(), team_choices(g.user.access)
    if teams and form.values["team"] not in teams:  # an admin of other teams only: their first
        form.values["team"] = teams[0]
    return render_form(form, None)


@bp.post("/new")
@require_role("admin")
def create() -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    form = TaskForm.from_request(request.form)
    definition = form.definition(None)
    if definition is None:
        return render_form(form, None, 400)
    try:
        check_placement(g.user.access, definition.team)
        stored = scheduler.register(definition)
    except (ConfigError, InvalidCronError, TaskAlreadyExistsError) as exc:
        form.fail(exc)
        return render_form(form, None, 400)
    _audit("task.create", stored.id, after=stored.masked())
    flash(f"Task {stored.id} created.", "success")
    return redirect(url_for("tasks.detail", task_id=stored.id), 303)


@bp.get("/edit/<path:task_id>")
@require_role("admin")
def edit(task_id: str) -> ResponseReturnValue:
    task = task_for(g.user.access, task_id, "admin")
    if task.handler_kind in CODE_KINDS:
        flash(f"{task.handler_kind} tasks are read-only here: what they run (code or a program) is defined in the "
              "application or a task file.", "info")
        return redirect(url_for("tasks.detail", task_id=task_id), 303)
    return render_form(TaskForm.from_task(task), task)


@bp.post("/edit/<path:task_id>")
@require_role("admin")
def update(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    current = task_for(g.user.access, task_id, "admin")
    form = TaskForm.from_request(request.form)
    if current.handler_kind in CODE_KINDS:
        form.errors["kind"] = CODE_REFUSED
        return render_form(form, current, 400)
    expected = posted_version()
    if expected is None:
        form.errors["form"] = "The form is missing the task's version; reload the page."
    definition = form.definition(current)
    if definition is None or expected is None:
        return render_form(form, current, 400)
    changes = {name: getattr(definition, name) for name in UPDATABLE_FIELDS}
    try:
        if definition.team != current.team:  # a move: an admin of both teams
            check_placement(g.user.access, definition.team)
        stored = scheduler.update_task(task_id, expected_updated_at=expected, **changes)
    except ConflictError:
        flash(CONFLICT, "error")
        return redirect(url_for("tasks.edit", task_id=task_id), 303)
    except (ConfigError, InvalidCronError) as exc:
        form.fail(exc)
        return render_form(form, current, 400)
    _audit("task.update", task_id, before=current.masked(), after=stored.masked())
    flash(f"Task {task_id} saved.", "success")
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


# --- enable / disable / delete ------------------------------------------------------------------


@bp.post("/enable/<path:task_id>")
@require_role("admin")
def enable(task_id: str) -> ResponseReturnValue:
    return _set_enabled(task_id, True)


@bp.post("/disable/<path:task_id>")
@require_role("admin")
def disable(task_id: str) -> ResponseReturnValue:
    return _set_enabled(task_id, False)


def _set_enabled(task_id: str, enabled: bool) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    current = task_for(g.user.access, task_id, "admin")
    expected = posted_version()
    if expected is None:
        abort(400, "The form is missing the task's version; reload the page.")
    try:
        stored = scheduler.update_task(task_id, expected_updated_at=expected, enabled=enabled)
    except ConflictError:
        flash(CONFLICT, "error")
        return redirect(url_for("tasks.detail", task_id=task_id), 303)
    verb = "enable" if enabled else "disable"
    _audit(f"task.{verb}", task_id, before=current.masked(), after=stored.masked())
    flash(f"Task {task_id} {verb}d.", "success")
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


@bp.get("/delete/<path:task_id>")
@require_role("admin")
def confirm_delete(task_id: str) -> ResponseReturnValue:
    return render_template("tasks/delete.html", task=task_for(g.user.access, task_id, "admin"))


@bp.post("/delete/<path:task_id>")
@require_role("admin")
def delete(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    task = task_for(g.user.access, task_id, "admin")
    expected = posted_version()
    if expected is None:
        return render_template("tasks/delete.html", task=task,
                               error="The form is missing the task's version; reload the page."), 400
    try:
        deleted = scheduler.task_ops.delete(task_id, expected)
    except ConflictError:
        flash(CONFLICT, "error")
        return redirect(url_for("tasks.confirm_delete", task_id=task_id), 303)
    _audit("task.delete", task_id, before=deleted.masked(), team=deleted.team)  # the task is gone: say its team
    flash(f"Task {task_id} deleted.", "success")
    return redirect(url_for("tasks.index"), 303)


# --- trigger / rerun -----------------------------------------------------------------------------


@bp.post("/trigger/<path:task_id>")
@require_role("operator")
def trigger(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    task = task_for(g.user.access, task_id, "operator")
    key = request.form.get("idempotency_key", "").strip() or None
    source = request.form.get("source", "").strip() or f"dashboard:{g.user.name}"
    try:
        existed = repeated_key(g.user.access, task_id, key)
        occurrence = scheduler.submit(task_id, source=source, idempotency_key=key)
    except ConfigError as exc:
        return render_detail(task, {exc.field: exc.message.removeprefix(f"{exc.field}: ")},
                             {"idempotency_key": key or "", "source": request.form.get("source", "")}), 400
    execution = scheduler.execution.get(occurrence)
    _audit("task.trigger", task_id, after={"occurrence_id": occurrence, "status": execution.status,
                                           "source": source, "idempotency_key": key, "existing": existed})
    if existed:
        flash(f"Occurrence {occurrence} for idempotency key {key} already exists ({execution.status}); "
              "it was not run again.", "info")
    else:
        _flash_started(task_id, occurrence, execution.status, execution.reason)
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


@bp.post("/rerun/<occurrence_id>/<path:task_id>")
@require_role("operator")
def rerun(task_id: str, occurrence_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    task_for(g.user.access, task_id, "operator")
    try:
        original = scheduler.execution.get(occurrence_id, g.user.access.scope())  # not one it left in another team
    except ExecutionNotFoundError:
        original = None
    if original is None or original.task_id != task_id:
        abort(404, f"Task {task_id} has no occurrence {occurrence_id}.")
    occurrence = scheduler.submit(task_id, source=f"rerun:{occurrence_id}")
    execution = scheduler.execution.get(occurrence)
    _audit("task.rerun", task_id, before={"occurrence_id": occurrence_id, "status": original.status},
           after={"occurrence_id": occurrence, "status": execution.status, "source": execution.source})
    _flash_started(task_id, occurrence, execution.status, execution.reason)
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


def _flash_started(task_id: str, occurrence: str, status: ExecutionStatus, reason: str | None) -> None:
    if status == ExecutionStatus.SKIPPED:
        flash(f"Task {task_id} was not started: occurrence {occurrence} is skipped ({reason or 'slot busy'}); "
              "another execution of this task holds its slot.", "warning")
    elif status == ExecutionStatus.QUEUED:
        flash(f"Task {task_id} is queued for a node that can run it: occurrence {occurrence}.", "success")
    elif status == ExecutionStatus.MISSED:
        flash(f"Task {task_id} was not started: no live node can run it ({reason}); occurrence {occurrence} is "
              "journaled missed. Start a node with the application's hooks or in the task's group.", "warning")
    else:
        flash(f"Task {task_id} started: occurrence {occurrence} ({status}).", "success")


# --- pause / resume --------------------------------------------------------------------------------


@bp.post("/pause/<path:task_id>")
@require_role("operator")
def pause(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    task = task_for(g.user.access, task_id, "operator")
    if scheduler.task_ops.state(task_id).state == "paused":  # a stale page: its form is gone, so are its errors
        flash(f"Task {task_id} is already paused; resume it first to pause it with another reason.", "info")
        return redirect(url_for("tasks.detail", task_id=task_id), 303)
    typed = {name: request.form.get(name, "").strip() for name in ("reason", "minutes", "until", "until_tz")}
    reason = typed["reason"]
    if not reason:
        return render_detail(task, {"reason": "Say why it is paused: the next operator reads it."}, typed), 400
    end = pause_end(typed["minutes"], typed["until"], typed["until_tz"], scheduler.task_ops.now_ms())
    if end.errors:
        return render_detail(task, end.errors, typed), 400
    until = end.until_ms
    try:
        paused = scheduler.pause(task_id, reason=reason, until_ms=until, by=g.user.name)
    except ConfigError as exc:
        field = "until" if exc.field == "until_ms" else exc.field
        return render_detail(task, {field: exc.message.removeprefix(f"{exc.field}: ")}, typed), 400
    _audit("task.pause", task_id, before={"paused": None},
           after={"paused_until": until, "paused_by": g.user.name, "revision": paused.revision}, reason=reason)
    flash(f"Task {task_id} paused{' ' + end.shown if end.shown else ''}.", "success")
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


@bp.post("/resume/<path:task_id>")
@require_role("operator")
def resume(task_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    before = task_for(g.user.access, task_id, "operator")
    resumed = scheduler.resume(task_id, by=g.user.name)
    was = before.paused
    _audit("task.resume", task_id, before={"paused_by": was.by, "reason": was.reason} if was else {"paused": None},
           after={"paused": None, "revision": resumed.revision})
    flash(f"Task {task_id} resumed.", "success")
    return redirect(url_for("tasks.detail", task_id=task_id), 303)


# --- detail ----------------------------------------------------------------------------------------


@bp.get("/view/<path:task_id>")
def detail(task_id: str) -> ResponseReturnValue:
    task = task_for(g.user.access, task_id)
    if wants_fragment():
        return occurrences(task_id)
    return render_detail(task, {}, {})


@bp.get("/occurrences/<path:task_id>")
def occurrences(task_id: str) -> ResponseReturnValue:
    """The history fragment (re-fetched every 5 s while one of its rows is running); opened
    directly (a copied link, the browser's history), the task's page that holds it."""
    ops = scheduler_of(current_app).task_ops
    task = task_for(g.user.access, task_id)
    before = request.args.get("before") or None
    if not wants_fragment():
        return redirect(url_for("tasks.detail", task_id=task_id, before=before))
    history = ops.occurrences(task_id, HISTORY_PAGE, before, task.team)
    return render_template("tasks/_occurrences.html", task=task, history=history, before=before, log_links=log_links())
