"""``/api/v1/tasks``: search, read, create, update, delete, pause / resume, trigger, backfill.

The same runtime calls as the task pages (``webapp/tasks.py``): ``scheduler.task_ops.search``,
``register``, ``update_task`` (compare-and-set on ``updated_at``), ``task_ops.delete``,
``pause`` / ``resume``, ``submit``, ``backfill``; the same audit actions. Like the form, the API edits
``api`` and ``hook`` tasks only and never accepts code; definitions go out masked, and a
masked value sent back keeps the stored secret (``restore_masked``).

Ids may hold ``/``: as on the pages, an action comes before the id
(``POST /api/v1/tasks/trigger/<id>``), and ``/api/v1/tasks/<id>`` is the task itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flask import current_app
from pydantic import BaseModel

from scheduler_core.errors import ConfigError
from scheduler_core.masking import restore_masked
from scheduler_core.model import DECLARED, TaskDefinition
from scheduler_core.runtime.task_operations import TaskRow
from webapp.api import schemas as s
from webapp.api import task_schemas as t
from webapp.api.core import CONFLICT_CODE, ApiProblem, Caller, operation
from webapp.api.schemas import Strict
from webapp.node import scheduler_of
from webapp.task_form import CODE_KINDS, CODE_REFUSED
from webapp.team_scope import check_placement, repeated_key, task_for

MAX_PAUSE_MINUTES = t.MAX_PAUSE_MINUTES


def task_out(task: TaskDefinition) -> t.Task:
    return t.Task.model_validate(task.masked())


def _row(row: TaskRow) -> t.TaskRow:
    return t.TaskRow(id=row.id, task=task_out(row.task) if row.task else None, problem=row.problem,
                     state=str(row.state) if row.state else None, last_status=row.last.status if row.last else None,
                     last_occurrence_id=row.last.occurrence_id if row.last else None, next_run_ms=row.next_run_ms)


def _declared(body: Strict, names: Iterable[str]) -> dict[str, Any]:
    """The body's task fields as the core takes them: a policy model as its mapping (the core parses it)."""
    values = {}
    for name in names:
        value = getattr(body, name)
        values[name] = value.model_dump() if isinstance(value, BaseModel) else value
    return values


def _no_code(handler: dict[str, Any] | None) -> None:
    kind = handler.get("kind") if handler else None
    if kind in CODE_KINDS:
        raise ConfigError("handler.kind", CODE_REFUSED)


@operation("GET", "/tasks", summary="Search tasks (the Tasks page's field:value search), keyset pages",
           role="viewer", query=t.TaskSearch, response=t.TaskPage)
def list_tasks(caller: Caller, query: t.TaskSearch) -> t.TaskPage:
    page = scheduler_of(current_app).task_ops.search(query.q, query.limit, after=query.after, before=query.before,
                                                     scope=caller.access.scope())
    return t.TaskPage(rows=[_row(row) for row in page.rows], next_after=page.next_after, prev_before=page.prev_before)


@operation("GET", "/tasks/<path:task_id>", summary="One task's stored definition (secrets masked)", role="viewer",
           response=t.Task)
def get_task(caller: Caller, task_id: s.TaskId) -> t.Task:
    return task_out(task_for(caller.access, task_id))


@operation("GET", "/schedules/<path:task_id>", role="viewer", response=t.ScheduleOut,
           summary="A task's schedule described: next 10 fire times, last 10 runs, counts of what did not run")
def describe_task(caller: Caller, task_id: s.TaskId) -> t.ScheduleOut:
    task_for(caller.access, task_id)
    found = scheduler_of(current_app).describe(task_id)
    runs = [t.RecentRunOut(occurrence_id=r.occurrence_id, trigger=str(r.trigger), scheduled_minute=r.scheduled_minute,
                           status=str(r.status), reason=r.reason, started_at=r.started_at, finished_at=r.finished_at,
                           duration_ms=r.duration_ms) for r in found.last_runs]
    c = found.counts
    return t.ScheduleOut(task_id=found.task_id, state=str(found.state), next_fire_times=found.next_fire_times,
                         last_runs=runs, counts=t.ScheduleCountsOut(
                             missed=c.missed, skipped_by_overlap=c.skipped_by_overlap,
                             dropped_from_buffer=c.dropped_from_buffer, skipped_by_run_limit=c.skipped_by_run_limit,
                             waiting=c.waiting, paused_by_failure=found.paused_by_failure, since_ms=c.since_ms),
                         runs_counted=found.runs_counted, runs_left=found.runs_left,
                         limit_reached_at=found.limit_reached_at)


@operation("POST", "/tasks", summary="Create an api or hook task", role="admin", body=t.TaskCreate,
           response=t.Task, status=201)
def create_task(caller: Caller, body: Strict) -> t.Task:
    _no_code(getattr(body, "handler", None))
    definition = TaskDefinition(**_declared(body, (f.name for f in DECLARED)))
    check_placement(caller.access, definition.team)
    stored = scheduler_of(current_app).register(definition)
    caller.audit("task.create", stored.id, after=stored.masked())
    return task_out(stored)


@operation("PATCH", "/tasks/<path:task_id>", summary="Change a task at the version read (409 when it changed)",
           role="admin", body=t.TaskUpdate, response=t.Task)
def update_task(caller: Caller, body: Strict, task_id: s.TaskId) -> t.Task:
    scheduler = scheduler_of(current_app)
    current = task_for(caller.access, task_id, "admin")
    given = body.model_fields_set - {"expected_updated_at"}
    if current.handler_kind in CODE_KINDS and given - {"enabled"}:
        raise ConfigError("handler.kind", f"{current.handler_kind} tasks are read-only here (only enabled may "
                                          "change): what they run (code or a program) is defined in the "
                                          "application or a task file")
    changes = _declared(body, given)
    if "handler" in changes:
        _no_code(changes["handler"])
    for declared in DECLARED:
        if declared.name in changes and changes[declared.name] is None and declared.default is not None:
            raise ConfigError(declared.name, "cannot be null (leave it out to keep the stored value)")
        if declared.spec.secret and declared.name in changes:
            changes[declared.name] = restore_masked(changes[declared.name], getattr(current, declared.name),
                                                    declared.name)
    if changes.get("team", current.team) != current.team:  # a move: an admin of both teams
        check_placement(caller.access, changes["team"])
    version = body.expected_updated_at  # type: ignore[attr-defined]  # TaskUpdate's fields are computed
    stored = scheduler.update_task(task_id, expected_updated_at=version, **changes)
    caller.audit("task.update", task_id, before=current.masked(), after=stored.masked())
    return task_out(stored)


@operation("DELETE", "/tasks/<path:task_id>", summary="Delete a task at the version read", role="admin",
           body=s.Version, response=t.Deleted)
def delete_task(caller: Caller, body: s.Version, task_id: s.TaskId) -> t.Deleted:
    task_for(caller.access, task_id, "admin")
    deleted = scheduler_of(current_app).task_ops.delete(task_id, body.expected_updated_at)
    caller.audit("task.delete", task_id, before=deleted.masked(), team=deleted.team)
    return t.Deleted(id=task_id, deleted=True)


@operation("POST", "/tasks/pause/<path:task_id>", summary="Pause a task's cron occurrences", role="operator",
           body=t.PauseIn, response=t.Task)
def pause_task(caller: Caller, body: t.PauseIn, task_id: s.TaskId) -> t.Task:
    scheduler = scheduler_of(current_app)
    task_for(caller.access, task_id, "operator")
    reason = body.reason.strip()
    if not reason:
        raise ConfigError("reason", "say why it is paused: the next operator reads it")
    until = None
    if body.minutes is not None:
        if not 1 <= body.minutes <= MAX_PAUSE_MINUTES:
            raise ConfigError("minutes", f"must be a whole number of minutes, 1 to {MAX_PAUSE_MINUTES} (7 days)")
        until = scheduler.task_ops.now_ms() + body.minutes * 60_000
    if scheduler.task_ops.state(task_id).state == "paused":  # the task's state, not the input: a conflict
        raise ApiProblem(409, "Conflict", f"{task_id} is already paused; resume it first to pause it with "
                         "another reason", CONFLICT_CODE, "task_id")
    paused = scheduler.pause(task_id, reason=reason, until_ms=until, by=caller.name)
    caller.audit("task.pause", task_id, before={"paused": None},
                 after={"paused_until": until, "paused_by": caller.name, "revision": paused.revision}, reason=reason)
    return task_out(paused)


@operation("POST", "/tasks/resume/<path:task_id>", summary="Resume a paused task", role="operator",
           response=t.Task)
def resume_task(caller: Caller, task_id: s.TaskId) -> t.Task:
    scheduler = scheduler_of(current_app)
    before = task_for(caller.access, task_id, "operator")
    resumed = scheduler.resume(task_id, by=caller.name)
    was = before.paused
    caller.audit("task.resume", task_id,
                 before={"paused_by": was.by, "reason": was.reason} if was else {"paused": None},
                 after={"paused": None, "revision": resumed.revision})
    return task_out(resumed)


@operation("POST", "/tasks/trigger/<path:task_id>",
           summary="Run a task now (never waits for the run); the same idempotency key returns the same occurrence",
           role="operator", body=t.TriggerIn, response=t.Triggered, status=202)
def trigger_task(caller: Caller, body: t.TriggerIn, task_id: s.TaskId) -> t.Triggered:
    scheduler = scheduler_of(current_app)
    task_for(caller.access, task_id, "operator")
    key = (body.idempotency_key or "").strip() or None
    source = (body.source or "").strip() or f"api:{caller.name}"
    existed = repeated_key(caller.access, task_id, key)
    occurrence = scheduler.submit(task_id, source=source, idempotency_key=key)
    execution = scheduler.execution.get(occurrence)
    caller.audit("task.trigger", task_id, after={"occurrence_id": occurrence, "status": execution.status,
                                                 "source": source, "idempotency_key": key, "existing": existed})
    return t.Triggered(occurrence_id=occurrence, status=execution.status, reason=execution.reason, existing=existed)


@operation("POST", "/tasks/backfill/<path:task_id>",
           summary="Run a task's past fire times in a range, each once, one at a time (minutes that ran are "
                   "left alone); dry_run says what the range holds", role="operator", body=t.BackfillIn,
           response=t.BackfillOut)
def backfill_task(caller: Caller, body: t.BackfillIn, task_id: s.TaskId) -> t.BackfillOut:
    # audited by the core (task.backfill, in the transaction that queues the runs)
    task_for(caller.access, task_id, "operator")
    done = scheduler_of(current_app).backfill(task_id, body.start_ms, body.end_ms, by=caller.name,
                                              reason=body.reason, dry_run=body.dry_run)
    return t.BackfillOut(task_id=done.task_id, count=done.count, first_ms=done.first_ms, last_ms=done.last_ms,
                         new=done.new, again=done.again, already=done.already, queued=done.queued,
                         dry_run=done.dry_run)
