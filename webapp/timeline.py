"""The timeline (``/timeline/``, any signed-in user): every enabled task's fire times over the
next 24 hours (or 6, or 1: the axis's times zoom in), by node group, paused and excluded times
shown as such; one page of tasks at a time, filtered by group and by words in the id or name
(``scheduler_core.runtime.timeline`` computes the rows). Times are UTC, by the database clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, current_app, g, render_template, request
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError
from scheduler_core.runtime.timeline import HOUR_MS, NO_GROUP, WINDOWS, Mark, Timeline, timeline
from webapp.forms import whole_number
from webapp.htmx import shown_again
from webapp.node import scheduler_of

bp = Blueprint("timeline", __name__, url_prefix="/timeline")
AXIS_LABELS = 6
ZOOM = {24: 6, 6: 1}  # a label of this window opens the next one in, starting there
_NAMES = {"hours": "hours", "start": "start", "page": "page"}


@bp.get("/")
def index() -> ResponseReturnValue:
    args = request.args
    scheduler = scheduler_of(current_app)
    now = scheduler.task_ops.now_ms()
    filters = {"group": args.get("group", ""), "q": args.get("q", "")}
    try:
        numbers = {name: _number(args.get(name), name) for name in _NAMES}
        scope = g.user.access.scope()  # the node's snapshot, unless a task changed since; the user's teams'
        stored = [task for task in scheduler.refresh_tasks(if_changed=True) if scope.allows(task.team)]
        shown = timeline(stored, now, hours=_or(numbers["hours"], 24), start_ms=numbers["start"],
                         group=filters["group"] or None, search=filters["q"], page=_or(numbers["page"], 1))
    except ConfigError as exc:
        return shown_again(render_template("timeline/index.html", timeline=None, filters=filters, windows=WINDOWS,
                                           no_group=NO_GROUP, error=f"{exc.field}: "
                                           f"{exc.message.removeprefix(f'{exc.field}: ')}"))
    return render_template("timeline/index.html", timeline=shown, filters=filters, windows=WINDOWS, no_group=NO_GROUP,
                           error=None, axis=_axis(shown), now=now, mark=Mark,
                           later=shown.start_ms + shown.hours * HOUR_MS,
                           earlier=max(shown.start_ms - shown.hours * HOUR_MS, now) if shown.start_ms > now else None)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _number(text: str | None, name: str) -> int | None:
    if text is None or text == "":
        return None
    value = whole_number(text)
    if value is None:
        raise ConfigError(name, f"must be a whole number (got {text[:40]!r})")
    return value


def _axis(shown: Timeline) -> list[dict[str, Any]]:
    """``AXIS_LABELS`` times, evenly spaced from the window's start, each linking to the window
    one zoom level in that starts there (none at one hour)."""
    step = shown.hours * HOUR_MS // AXIS_LABELS
    labels = []
    for i in range(AXIS_LABELS):
        at = shown.start_ms + i * step
        moment = datetime.fromtimestamp(at / 1000, UTC)
        labels.append({"ms": at, "text": moment.strftime("%H:%M"),
                       "zoom": ZOOM.get(shown.hours)})
    return labels
