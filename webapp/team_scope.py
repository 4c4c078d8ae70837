"""A team's objects as the caller may reach them (docs/teams.md), for the pages and the API alike.

``task_for`` finds a task the caller can see (TaskNotFoundError otherwise: the same 404 as a task
that does not exist, so a guess learns nothing) and answers 403 when the caller's role in its team
is below what the action needs. ``check_placement`` refuses to put a task in a team the caller is
not an admin of (a ConfigError naming ``team``, worded alike whether the team exists or not);
``team_choices`` are the teams the task form offers; ``audit_team`` is the team a bulk action's
audit entry is about; ``repeated_key`` keeps a trigger's idempotency key from answering another
team's run. ``delivery_for`` is ``task_for`` for a queued message (a team's alert, or a message
of no one team, which only a global role reaches).
"""

from __future__ import annotations

from flask import current_app
from werkzeug.exceptions import Forbidden, NotFound

from scheduler_core.access import Access, Scope
from scheduler_core.errors import ConfigError, ExecutionNotFoundError
from scheduler_core.model import TaskDefinition
from scheduler_core.reach.queue_operations import QueueEntry
from webapp.node import accounts_of, reach_of, scheduler_of


def task_for(access: Access, task_id: str, role: str = "viewer") -> TaskDefinition:
    """The stored task when ``access`` sees its team; 403 below ``role`` there."""
    task = scheduler_of(current_app).task_ops.get(task_id, access.scope())
    if not access.can(role, task.team):
        raise Forbidden(f"this needs the {role} role in team {task.team}")
    return task


def delivery_for(access: Access, queue_id: str, role: str = "viewer") -> QueueEntry:
    """The queued message when ``access`` sees it (404 as for none); 403 below ``role`` in its team."""
    entry = reach_of(current_app).queue.get(queue_id, access.scope())
    if entry is None:
        raise NotFound(f"No queue entry {queue_id}.")
    if not access.may(role, entry.team):
        where = f"team {entry.team}" if entry.team is not None else "every team (a global role)"
        raise Forbidden(f"this needs the {role} role in {where}")
    return entry


def repeated_key(access: Access, task_id: str, key: str | None) -> bool:
    """Whether ``key`` already named a manual run of ``task_id`` (the trigger then answers that run).
    A run of that id and key left in another team (the task moved, or its id was reused) is not
    answered: ConfigError naming ``idempotency_key``."""
    scheduler = scheduler_of(current_app)
    existing = scheduler.repeated_occurrence(task_id, key)
    if existing is None:
        return False
    try:
        scheduler.execution.get(existing, access.scope())
    except ExecutionNotFoundError:
        raise ConfigError("idempotency_key", "was used for this task id in another team: choose another key") from None
    return True


def check_placement(access: Access, team: str, field: str = "team") -> None:
    """``access`` may create and keep tasks in ``team`` (an admin there)."""
    if not access.can("admin", team):
        raise ConfigError(field, f"names no team you are an admin of: {team!r}")


def audit_team(scope: Scope) -> str | None:
    """The team a bulk action's audit entry is about: the caller's one team, if they act in one;
    None for a global caller or several teams (an entry global users see)."""
    return next(iter(scope.teams)) if scope.teams is not None and len(scope.teams) == 1 else None


def team_choices(access: Access, current: str | None = None) -> list[str]:
    """The teams a task may be put in by ``access`` (and ``current``, the team it is in)."""
    admin_in = access.teams("admin")
    every = accounts_of(current_app).teams()
    return [team for team in every if admin_in is None or team in admin_in or team == current]
