"""``kind: hook``: the host application's ``on_task_execute(event)`` does the work."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler_core.errors import ConfigError, SchedulerTaskSkippedError
from scheduler_core.executors.base import ExecutionRequest, Outcome
from scheduler_core.statuses import AttemptStatus


class HookExecutor:
    kind = "hook"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        for key in config:
            if key != "kind":
                raise ConfigError(f"handler.{key}", "is not a hook handler setting")
        return {"kind": "hook"}

    def execute(self, request: ExecutionRequest) -> Outcome:
        hook = request.hooks.on_task_execute
        if hook is None:
            return Outcome(AttemptStatus.INTERRUPTED, error="missing handler: no on_task_execute hook is set")
        event = request.hooks.event(request)
        try:
            result = hook(event)
        except SchedulerTaskSkippedError as exc:
            return Outcome(AttemptStatus.INTERRUPTED, error=f"skipped by the handler: {exc.message}")
        except Exception as exc:
            return Outcome(AttemptStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            return Outcome(AttemptStatus.FAILED, error=f"the handler's result is not JSON ({type(result).__name__})")
        return Outcome(AttemptStatus.SUCCESS, result=result)
