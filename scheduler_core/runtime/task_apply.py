"""``hai-scheduler tasks apply``: the difference between a task file and the database, and its
application, one transaction per task, each a compare-and-set on the ``updated_at`` read.

- create: a task the database does not have; stored marked ``managed_by`` the file's source;
- update: a stored task whose declared fields differ (pause state and ``managed_by`` are kept);
- delete (``--prune`` only): a task of this source and of the file's team that the file no longer
  lists; a task made on the dashboard, by another source or in another team is never deleted;
- unchanged: the same definition (``TaskDefinition.same_definition``): a second apply writes nothing.

A file never moves a task between teams: an entry for a task stored in another team refuses the
whole apply (a file written before teams, without ``team:``, would otherwise pull every task put
in another team back to ``default``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from scheduler_core.errors import ConfigError, ConflictError
from scheduler_core.model import UPDATABLE_FIELDS, TaskDefinition
from scheduler_core.runtime.scheduler import Scheduler
from scheduler_core.runtime.task_files import TaskFile
from scheduler_core.store.task_files import TaskFileRepository
from scheduler_core.validation import shown


class Change(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Step:
    """One task's part of the plan."""

    change: Change
    task_id: str
    wanted: TaskDefinition | None  # the file's definition (None for a delete)
    stored: TaskDefinition | None  # the database's, as read for the plan (None for a create)
    fields: tuple[str, ...] = ()  # an update's changed fields

    def lines(self) -> Iterator[str]:
        """The step as the diff prints it; secret values masked."""
        if self.change == Change.UPDATE:
            yield f"update     {self.task_id}: {', '.join(self.fields)}"
            assert self.stored is not None and self.wanted is not None
            before, after = self.stored.masked(), self.wanted.masked()
            for name in self.fields:
                real = (getattr(self.stored, name), getattr(self.wanted, name))
                if name in ("handler", "params") and all(isinstance(v, Mapping) for v in real):
                    for path in _changed_paths(*real, name):  # what changed inside, masked
                        yield f"    {path}: {shown(_at(before[name], path))} -> {shown(_at(after[name], path))}"
                else:
                    yield f"    {name}: {shown(before[name])} -> {shown(after[name])}"
        else:
            yield f"{self.change.value:<10} {self.task_id}"


@dataclass(frozen=True)
class Plan:
    source: str
    steps: tuple[Step, ...]

    def summary(self) -> str:
        counts = {change: sum(1 for step in self.steps if step.change == change) for change in Change}
        if not any(counts[c] for c in (Change.CREATE, Change.UPDATE, Change.DELETE)):
            return f"no change ({counts[Change.UNCHANGED]} unchanged)"
        return ", ".join(f"{counts[change]} to {change.value}" if change != Change.UNCHANGED
                         else f"{counts[change]} unchanged" for change in Change)

    @property
    def changes(self) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if step.change != Change.UNCHANGED)


_ABSENT = "(absent)"


def _changed_paths(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for key in sorted({*old, *new}, key=str):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            yield from _changed_paths(a, b, f"{prefix}.{key}")
        elif a != b:
            yield f"{prefix}.{key}"


def _at(masked: Any, path: str) -> Any:
    """The value at ``handler.headers.X`` in a masked copy (``***`` where a secret was)."""
    for key in path.split(".")[1:]:
        if not isinstance(masked, Mapping):
            return masked
        masked = masked.get(key, _ABSENT)
    return masked


def _changed_fields(stored: TaskDefinition, wanted: TaskDefinition) -> tuple[str, ...]:
    return tuple(name for name in UPDATABLE_FIELDS if getattr(stored, name) != getattr(wanted, name))


def _spent(stored: TaskDefinition, wanted: TaskDefinition) -> bool:
    """``stored`` disabled itself on reaching its ``max_runs`` and the file names the same limit:
    it stays disabled (a file that changes ``max_runs`` enables it with a new count; so does an
    operator). docs/semantics.md S10."""
    return stored.limit_reached_at is not None and not stored.enabled and wanted.max_runs == stored.max_runs


def plan(scheduler: Scheduler, task_file: TaskFile, source: str, prune: bool) -> Plan:
    """What applying ``task_file`` as ``source`` would change. Reads; changes nothing."""
    stored = {task.id: task for task in scheduler.refresh_tasks()}
    managed = TaskFileRepository(scheduler.engine).sources()
    steps = []
    for wanted in task_file.tasks:
        current = stored.get(wanted.id)
        if current is not None and current.team != task_file.team:  # never moved by a file (docs/teams.md)
            raise ConfigError(f"tasks.{wanted.id}.team", f"is a task of team {current.team!r}; this file applies "
                                                         f"to team {task_file.team!r} (its top-level team:): apply it "
                                                         "from a file of that team, or move it on the dashboard")
        if current is not None and _spent(current, wanted):  # a file applied again grants no new runs
            wanted = replace(wanted, enabled=False)
        if current is None:
            steps.append(Step(Change.CREATE, wanted.id, wanted, None))
        elif current.same_definition(wanted):
            steps.append(Step(Change.UNCHANGED, wanted.id, wanted, current))
        else:
            steps.append(Step(Change.UPDATE, wanted.id, wanted, current, _changed_fields(current, wanted)))
    if prune:
        listed = {task.id for task in task_file.tasks}
        ours = {i for i, task in stored.items() if task.team == task_file.team}
        for task_id in sorted(i for i, s in managed.items() if s == source and i not in listed and i in ours):
            steps.append(Step(Change.DELETE, task_id, None, stored[task_id]))
    return Plan(source, tuple(steps))


def apply_step(scheduler: Scheduler, step: Step, source: str) -> None:
    """One step in its own transaction; ConflictError when the task changed since the plan read
    it (then this step writes nothing)."""
    if step.change == Change.CREATE:
        assert step.wanted is not None
        TaskFileRepository(scheduler.engine).create(step.wanted, source)
    elif step.change == Change.UPDATE:
        assert step.wanted is not None and step.stored is not None
        changes: dict[str, Any] = {name: getattr(step.wanted, name) for name in step.fields}
        scheduler.update_task(step.task_id, expected_updated_at=step.stored.updated_at, **changes)
    elif step.change == Change.DELETE:
        assert step.stored is not None
        scheduler.task_ops.delete(step.task_id, step.stored.updated_at)
    else:
        raise ConflictError(f"task {step.task_id!r}: nothing to apply", task_id=step.task_id)
