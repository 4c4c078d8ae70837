"""How the task screens are drawn: the template context each page of ``templates/tasks/`` needs,
built from a task and the request. What a request does (create, edit, enable, trigger, pause, ...)
is decided by the routes in ``webapp/tasks.py``; they call these to show the result.

- ``search_error``: a refused search, shown next to the search box while the rows stay
- ``schedule_preview``: what a cron expression being typed means in a zone (its next fire times),
  or why it is refused
- ``render_form``: the create / edit form, with the time zone suggestions and the preview
- ``render_detail``: a task's page: its masked definition, next runs with their DST notes, state,
  run durations (``duration_chart.py``) and history
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from zoneinfo import available_timezones

from flask import current_app, g, render_template, request
from flask.typing import ResponseReturnValue

from scheduler_core.cron import dst_note
from scheduler_core.errors import ConfigError, InvalidCronError
from scheduler_core.model import TaskDefinition
from scheduler_core.runtime.schedule_description import RecentRun
from scheduler_core.task_policies import CATCHUP_WINDOW_MAX_MS
from webapp.duration_chart import RUNS, duration_chart
from webapp.htmx import shown_again, wants_fragment
from webapp.node import scheduler_of
from webapp.task_form import CODE_KINDS, METHODS, SECTIONS, TaskForm, cron_error
from webapp.team_scope import team_choices

HISTORY_PAGE = 25


def log_links() -> bool:
    return "logs.detail" in current_app.view_functions


# --- list ---------------------------------------------------------------------------------


def search_error(context: dict[str, Any], exc: ConfigError) -> ResponseReturnValue:
    """A bad search: the message next to the search box, and the rows shown stay as they were."""
    message = exc.message.removeprefix(f"{exc.field}: ")
    if wants_fragment():
        response = shown_again(render_template("tasks/_search_error.html", error=message))
        response.headers["HX-Reswap"] = "none"  # keep the rows; the error goes out of band
        return response
    return shown_again(render_template("tasks/index.html", page=None, error=message, **context))


# --- cron preview ------------------------------------------------------------------------------


def schedule_preview(cron: str, timezone: str, typed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The live preview's context: the schedule's next runs, through the calendar typed beside it
    (``typed``: the form's fields; a calendar with errors is left out and said so)."""
    if not cron.strip():
        return {"preview": None, "preview_error": None}
    calendar, calendar_errors = TaskForm.from_request(typed or {}).typed_calendar()
    try:
        return {"preview": scheduler_of(current_app).task_ops.preview(cron, timezone.strip() or None, calendar),
                "preview_error": None, "calendar_errors": calendar_errors}
    except InvalidCronError as exc:
        return {"preview": None, "preview_error": cron_error(exc.message)}
    except ConfigError as exc:
        return {"preview": None, "preview_error": exc.message}


# --- create / edit ------------------------------------------------------------------------------


def render_form(form: TaskForm, task: TaskDefinition | None, status: int = 200) -> ResponseReturnValue:
    # ``form`` is a stored task masked (TaskForm.from_task) or what this request posted: shown as it
    # is, so a secret just typed survives an error and a stored one is never sent.
    ops = scheduler_of(current_app).task_ops
    teams = team_choices(g.user.access, task.team if task is not None else None)
    return render_template("tasks/form.html", form=form, task=task, sections=SECTIONS, methods=METHODS, teams=teams,
                           zones=_zone_names(), live_groups=ops.live_groups(), catchup_window_max=CATCHUP_WINDOW_MAX_MS,
                           **schedule_preview(form.values["cron"], form.values["timezone"], form.values)), status


@lru_cache(maxsize=1)
def _zone_names() -> list[str]:
    """Suggestions for the time zone box (the core still validates what is typed)."""
    return sorted({zone for zone in available_timezones() if "/" in zone and not zone.startswith(("Etc/", "SystemV/"))}
                  | {"UTC"})


# --- detail ----------------------------------------------------------------------------------------


def render_detail(task: TaskDefinition, errors: dict[str, str], typed: dict[str, str]) -> str:
    scheduler = scheduler_of(current_app)
    ops = scheduler.task_ops
    history = ops.occurrences(task.id, HISTORY_PAGE, request.args.get("before") or None, task.team)
    state = ops.state(task.id)
    blocker = scheduler.execution.get(state.blocked_by).status if state.blocked_by else None
    definition = task.masked()
    code = definition["handler"].pop("code", None) if definition["handler"] else None
    next_runs = ops.next_runs(task)
    recent = ops.occurrences(task.id, RUNS, None, task.team).rows
    return render_template("tasks/detail.html", task=task, definition=definition, code=code, next_runs=next_runs,
                           run_notes=[dst_note(task.cron, task.timezone, ms) for ms in next_runs],
                           history=history, before=request.args.get("before") or None, errors=errors, typed=typed,
                           log_links=log_links(), code_kinds=CODE_KINDS, state=state, blocker_status=blocker,
                           counts=ops.schedule_counts(task.id, task.team),
                           durations=duration_chart([RecentRun.of(e) for e in recent]))
