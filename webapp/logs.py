"""Logs: attempt logs in keyset pages with filters (a start window read in the viewer's time
zone), one attempt's output with secrets masked, and log failures with repair / repair all."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flask import Blueprint, abort, current_app, flash, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from scheduler_core.errors import ConfigError, ExecutionNotFoundError, LogPersistFailedError
from scheduler_core.masking import mask_text, mask_values
from scheduler_core.statuses import AttemptStatus
from webapp.audit import record_action
from webapp.auth import require_role
from webapp.htmx import error_status, page_or_fragment, wants_fragment
from webapp.node import scheduler_of
from webapp.team_scope import audit_team

bp = Blueprint("logs", __name__, url_prefix="/logs")
PAGE = 50
FAILURES_SHOWN = 100
REPAIR_ALL_ROUNDS = 100  # up to 10,000 repairs per click; the page says how many remain
MAX_FILTER = 128
FILTER_FIELDS = ("task", "status", "source", "since", "until", "tz")


# --- filters ----------------------------------------------------------------------------


@dataclass
class LogQuery:
    """The filter form: what was typed (shown back as typed) and what it means."""

    raw: dict[str, str]
    task_id: str | None = None
    status: str | None = None
    source: str | None = None
    since: int | None = None
    until: int | None = None
    errors: dict[str, str] = field(default_factory=dict)


def _zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def parse_instant(raw: str, zone: ZoneInfo) -> int:
    """Unix ms from digits (already ms), ISO-8601 with an offset, or a local date-time in ``zone``."""
    text = raw.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)  # ValueError when it is none of these
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return int(moment.timestamp() * 1000)


def _text_filter(query: LogQuery, name: str) -> str | None:
    value = query.raw[name]
    if len(value) > MAX_FILTER:
        query.errors[name] = f"At most {MAX_FILTER} characters."
        return None
    return value or None


def read_filters(args: Any) -> LogQuery:
    query = LogQuery({name: (args.get(name) or "").strip() for name in FILTER_FIELDS})
    query.task_id = _text_filter(query, "task")
    query.source = _text_filter(query, "source")
    status = query.raw["status"] or None
    if status is not None and status not in tuple(AttemptStatus):
        query.errors["status"] = f"Choose one of {', '.join(tuple(AttemptStatus))}."
    else:
        query.status = status
    zone = _zone(query.raw["tz"] or "UTC")
    if zone is None:
        query.errors["tz"] = "Unknown time zone; use a name such as Europe/Paris or UTC."
        return query
    for name in ("since", "until"):
        if not query.raw[name]:
            continue
        try:
            setattr(query, name, parse_instant(query.raw[name], zone))
        except (ValueError, OverflowError):
            query.errors[name] = "Use a date and time such as 2025-01-31T14:30 (or ISO-8601 with an offset)."
    if query.since is not None and query.until is not None and query.since >= query.until:
        query.errors["until"] = "Must be later than the start."
    return query


def _link_args(query: LogQuery) -> dict[str, str]:
    """The filters as typed, for pager links (empty ones left out)."""
    return {name: value for name, value in query.raw.items() if value}


# --- masking ----------------------------------------------------------------------------


def shown_result(result: Any) -> str | None:
    """A result as indented JSON with secret-named values masked (strings: masked as text)."""
    if result is None:
        return None
    if isinstance(result, str):
        return mask_text(result)
    return json.dumps(mask_values(result), indent=2, sort_keys=True, default=str)


# --- pages ------------------------------------------------------------------------------


@bp.get("/")
def index() -> ResponseReturnValue:
    query = read_filters(request.args)
    page = None
    if not query.errors:
        try:
            page = scheduler_of(current_app).execution.log_page(
                query.task_id, query.status, query.source, query.since, query.until, PAGE,
                before=request.args.get("before") or None, after=request.args.get("after") or None,
                scope=g.user.access.scope())
        except ConfigError as exc:
            query.errors[exc.field] = exc.message
    fragment = wants_fragment()
    general = [message for name, message in query.errors.items() if name not in FILTER_FIELDS]
    code = error_status() if query.errors else 200  # an htmx swap shows its errors in the fragment
    return render_template(page_or_fragment("logs/index.html", "logs/_rows.html"), page=page, query=query,
                           link_args=_link_args(query), statuses=tuple(AttemptStatus), mask_text=mask_text,
                           fragment=fragment, general_errors=general), code


@bp.get("/entry/<log_id>")
def detail(log_id: str) -> ResponseReturnValue:
    log = scheduler_of(current_app).execution.log(log_id, g.user.access.scope())
    if log is None:
        abort(404, description=f"No log row {log_id!r} (pruned, or not projected yet).")
    return render_template("logs/detail.html", log=log, error=mask_text(log.error), result=shown_result(log.result))


@bp.get("/failures")
def failures() -> ResponseReturnValue:
    execution = scheduler_of(current_app).execution
    scope = g.user.access.scope()
    rows = execution.list_log_failures(FAILURES_SHOWN, 0, scope)
    return render_template(page_or_fragment("logs/failures.html", "logs/_failures_rows.html"), rows=rows,
                           count=execution.log_failure_count(scope=scope))


@bp.post("/failures/<occurrence_id>/repair")
@require_role("operator")
def repair(occurrence_id: str) -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    try:
        result = scheduler.execution.repair_log(occurrence_id, g.user.access.scope("operator"))
    except ExecutionNotFoundError:
        flash(f"There is no execution {occurrence_id}. Nothing was changed.", "error")
        return redirect(url_for("logs.failures"), 303)
    except LogPersistFailedError as exc:
        flash(f"Repair of {occurrence_id} failed: {mask_text(exc.message)}. Nothing was changed.", "error")
        return redirect(url_for("logs.failures"), 303)
    if not result.repaired:
        flash(f"The log of {occurrence_id} is already {result.log_persistence or 'not pending'} "
              "(someone else may have repaired it). Nothing was changed.", "info")
        return redirect(url_for("logs.failures"), 303)
    record_action("log.repair", occurrence_id, before={"log_persistence": "pending"},
                  after={"log_persistence": result.log_persistence})
    flash(f"The log of {occurrence_id} was written from the journal.", "success")
    return redirect(url_for("logs.failures"), 303)


@bp.post("/failures/repair-all")
@require_role("operator")
def repair_all() -> ResponseReturnValue:
    scheduler = scheduler_of(current_app)
    scope = g.user.access.scope("operator")
    before = scheduler.execution.log_failure_count(scope=scope)
    result = scheduler.execution.repair_all(REPAIR_ALL_ROUNDS, scope)
    record_action("log.repair_all", "log failures", before={"pending": before.label},
                  after={"repaired": result.repaired, "failed": result.failed, "remaining": result.remaining.label,
                         "rounds": result.rounds}, team=audit_team(scope))
    message = f"Repaired {result.repaired:,} log(s); {result.remaining.label} remain."
    if result.failed:
        message += f" {result.failed:,} could not be repaired (see the server log)."
    flash(message, "success" if not result.remaining.value else "warning")
    return redirect(url_for("logs.failures"), 303)
