"""Handler executors by kind: ``hook`` (host callables), ``api`` (HTTP), ``python`` and ``js``
(trusted code in a worker process), ``command`` (a trusted program, run without a shell)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler_core.errors import ConfigError
from scheduler_core.executors.base import CancelSignal, ExecutionContext, ExecutionRequest, Executor, Outcome
from scheduler_core.executors.code import JavaScriptCodeExecutor, PythonCodeExecutor
from scheduler_core.executors.command import CommandExecutor
from scheduler_core.executors.hook import HookExecutor
from scheduler_core.executors.http import HttpExecutor
from scheduler_core.validation import shown


def default_executors() -> list[Executor]:
    return [HookExecutor(), HttpExecutor(), PythonCodeExecutor(), JavaScriptCodeExecutor(), CommandExecutor()]


class ExecutorRegistry:
    """Executors by handler kind."""

    def __init__(self, executors: list[Executor] | None = None) -> None:
        self._by_kind: dict[str, Executor] = {}
        for executor in executors if executors is not None else default_executors():
            self._by_kind[executor.kind] = executor

    def get(self, kind: str) -> Executor | None:
        return self._by_kind.get(kind)

    def available_kinds(self) -> frozenset[str]:
        """The kinds this host can run now (an executor may say it cannot: ``available()``)."""
        return frozenset(kind for kind, executor in self._by_kind.items()
                         if getattr(executor, "available", lambda: True)())

    def validate(self, handler: Mapping[str, Any]) -> dict[str, Any]:
        kind = handler.get("kind", "hook")
        executor = self._by_kind.get(kind) if isinstance(kind, str) else None
        if executor is None:
            raise ConfigError("handler.kind", f"unsupported handler kind {shown(kind)}; "
                                              f"use one of {', '.join(sorted(self._by_kind))}")
        return executor.validate(handler)


__all__ = ["CancelSignal", "CommandExecutor", "ExecutionContext", "ExecutionRequest", "Executor", "ExecutorRegistry",
           "HookExecutor", "HttpExecutor", "JavaScriptCodeExecutor", "Outcome", "PythonCodeExecutor",
           "default_executors"]
