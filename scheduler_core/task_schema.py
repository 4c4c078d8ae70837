"""How each field of a task is declared, shown and changed: the metadata ``TaskDefinition`` carries.

Every field of ``model.TaskDefinition`` holds a ``TaskField`` in its dataclass metadata (as
APScheduler 4's ``Schedule`` carries attrs metadata): its label and hint, the widget the form
shows, whether an update may change it, its length bound (``model.validate_task`` checks the one
declared), and two values the door tests send through every door: an example it takes and one
its rule refuses. The store's column mapping, the task file's keys, the update path, the form and
the API's input and output schemas are derived from it. Who may change a task is the door's rule
(an admin; pausing, an operator), not a field's. docs/architecture.md, section 10, "A task
field", is the recipe.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from enum import StrEnum
from typing import Any


class Widget(StrEnum):
    """How a value is typed in (the form) and what type it has (the API)."""

    ID = "id"  # one line, set when the task is created and never changed
    LINE = "line"  # one line of text
    TEXT = "text"  # text over several lines
    CHECK = "check"  # a boolean
    CRON = "cron"  # a cron expression, with its preview
    ZONE = "zone"  # an IANA time zone name
    GROUP = "group"  # a node group, suggested from the groups live nodes advertise
    TEAM = "team"  # a team, chosen among those the user may create tasks in
    JSON = "json"  # a JSON object
    RETRY = "retry"  # a RetryPolicy: attempts and delays
    CATCHUP = "catchup"  # a CatchupPolicy: policy and window
    CALENDAR = "calendar"  # a Calendar: active window and exclusions
    OVERLAP = "overlap"  # an OverlapPolicy: policy and buffer limit
    COUNT = "count"  # a whole number from 1 to TaskField.max_length, or none
    HANDLER = "handler"  # the handler: the api fields, or the host's hook
    STORED = "stored"  # kept by the store (revision, timestamps, pause): nobody declares it


class Section(StrEnum):
    """The part of the form (a fieldset) a field is shown in."""

    TASK = "Task"
    SCHEDULE = "Schedule"
    EXECUTION = "Execution"
    ROUTING = "Routing and catch-up"
    STORED = "Stored"


@dataclass(frozen=True)
class TaskField:
    """A task field's declaration (see the module docstring)."""

    label: str
    widget: Widget
    section: Section
    hint: str = ""
    updatable: bool = True  # an update may change it (the id and the stored fields may not)
    max_length: int | None = None  # for text widgets; for COUNT, the largest number
    secret: bool = False  # shown masked (``masking``), sent back masked to keep the stored value
    example: Any = None  # a valid value other than the default (the round-trip test sets it)
    invalid: Any = None  # a value of the field's type that its rule refuses (the error test sends it everywhere)

    @property
    def declared(self) -> bool:
        """A user declares it (every widget but STORED)."""
        return self.widget is not Widget.STORED


def declare(spec: TaskField, default: Any = MISSING) -> Any:
    """A dataclass field carrying ``spec`` (and ``default``, when the field has one)."""
    if default is MISSING:
        return field(metadata={"task_field": spec})
    return field(default=default, metadata={"task_field": spec})


@dataclass(frozen=True)
class DeclaredField:
    """One field of a task class: its name, its declaration and its default (MISSING: required)."""

    name: str
    spec: TaskField
    default: Any

    @property
    def required(self) -> bool:
        return self.default is MISSING


def task_fields(cls: type, *, declared: bool | None = None) -> tuple[DeclaredField, ...]:
    """The fields of ``cls`` in declaration order (``declared``: only those a user declares, or only stored)."""
    found = []
    for item in fields(cls):
        spec = _spec(item)
        if declared is None or spec.declared == declared:
            found.append(DeclaredField(item.name, spec, item.default))
    return tuple(found)


def _spec(item: Field[Any]) -> TaskField:
    spec = item.metadata.get("task_field")
    if not isinstance(spec, TaskField):
        raise TypeError(f"task field {item.name} has no TaskField declaration")
    return spec


__all__ = ["DeclaredField", "Section", "TaskField", "Widget", "declare", "task_fields"]
