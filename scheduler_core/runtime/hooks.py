"""Lifecycle hooks of the host application.

Hooks come as a mapping (``{"on_task_execute": fn}``) or an object with those attributes.
``on_task_execute`` does the work of hook tasks; ``on_task_start``, ``on_task_finish`` and
``on_task_error`` observe every attempt. An observer that raises is logged with
HOOK_EXECUTION_FAILED and never changes the business outcome.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core.errors import ConfigError, HookExecutionFailedError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest
from scheduler_core.validation import check_text

logger = logging.getLogger("scheduler_core.hooks")
HOOK_NAMES = ("on_task_start", "on_task_execute", "on_task_finish", "on_task_error")
Hook = Callable[["TaskEvent"], Any]


@dataclass(frozen=True)
class TaskEvent:
    """What every hook receives."""

    task: Any  # the TaskDefinition being run
    context: ExecutionContext
    signal: CancelSignal  # observe it: is_set() / wait(seconds)
    status: str | None = None  # on_task_finish / on_task_error: the attempt's outcome
    result: Any = None
    error: str | None = None


class Hooks:
    """A validated set of hook callables (missing ones are None)."""

    def __init__(self, source: Mapping[str, Hook] | object | None = None) -> None:
        self.on_task_start: Hook | None = None
        self.on_task_execute: Hook | None = None
        self.on_task_finish: Hook | None = None
        self.on_task_error: Hook | None = None
        if source is None:
            return
        if isinstance(source, Mapping):
            for name in source:
                if name not in HOOK_NAMES:
                    raise ConfigError(f"hooks.{name}", f"is not a hook; use {', '.join(HOOK_NAMES)}")
            found = {name: source.get(name) for name in HOOK_NAMES}
        else:
            found = {name: getattr(source, name, None) for name in HOOK_NAMES}
        for name, fn in found.items():
            if fn is not None and not callable(fn):
                raise ConfigError(f"hooks.{name}", "must be callable")
            setattr(self, name, fn)

    @staticmethod
    def event(request: ExecutionRequest, **outcome: Any) -> TaskEvent:
        return TaskEvent(task=request.task, context=request.context, signal=request.signal, **outcome)

    def observe_run(self, name: str, request: ExecutionRequest, **outcome: Any) -> None:
        """``observe`` with the event of ``request``, made only when the hook is set (a runner
        calls two observers per attempt: with none set, that is nothing)."""
        if getattr(self, name) is not None:
            self.observe(name, self.event(request, **outcome))

    def observe(self, name: str, event: TaskEvent) -> None:
        """Call an observational hook; its failure is logged, never propagated."""
        hook: Hook | None = getattr(self, name)
        if hook is None:
            return
        try:
            hook(event)
        except Exception as exc:
            error = HookExecutionFailedError(f"{name} failed for {event.context.occurrence_id}: "
                                             f"{type(exc).__name__}: {exc}")
            logger.warning("%s", error, exc_info=True)


def load_hooks(spec: object, field: str = "hooks") -> object:
    """The application's hooks object named ``module:attribute`` (``myapp.jobs:hooks``), imported
    now, so that a typo fails before a node starts: ConfigError naming ``field`` when the module
    does not import, the attribute is missing, or it holds none of the hooks."""
    text = check_text(spec, field, 512, single_line=True).strip()
    module_name, colon, attribute = text.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigError(field, f"must be module:attribute, e.g. myapp.jobs:hooks (got {text!r})")
    try:
        found: object = importlib.import_module(module_name)
    except Exception as exc:  # any error the application's import raises: report it, start nothing
        raise ConfigError(field, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(field, f"{module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    hooks = Hooks(found)
    if all(getattr(hooks, name) is None for name in HOOK_NAMES):
        raise ConfigError(field, f"{text} has none of the hooks {', '.join(HOOK_NAMES)}")
    return found
