"""The executor interface. Executors know nothing of the database.

An executor gets the handler config, the execution context and a cancellation signal, and
returns an :class:`Outcome` saying whether the result is definite (success / failed /
interrupted) or whether the effect may have happened without a confirmed answer (unknown).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler_core.statuses import AttemptStatus

OutcomeStatus = AttemptStatus  # the name executors outside this package may have imported


_SIGNALS = threading.Lock()  # guards every CancelSignal's hand-over between cancel() and wait()


class CancelSignal:
    """A cancellation flag with a reason: closing, lease_lost, deleted, disabled, rescheduled.

    The Event a waiter sleeps on is made only when someone waits (a retry's back-off, a
    handler that sleeps on it): most executions are never cancelled nor waited on, and an
    Event (a Condition and its lock) per execution was a measurable share of a node's CPU.
    """

    __slots__ = ("_cancelled", "_event", "reason")

    def __init__(self) -> None:
        self.reason: str | None = None
        self._cancelled = False
        self._event: threading.Event | None = None

    def cancel(self, reason: str) -> None:
        with _SIGNALS:
            if self._cancelled:
                return
            self.reason = reason
            self._cancelled = True
            event = self._event
        if event is not None:
            event.set()

    def is_set(self) -> bool:
        return self._cancelled

    def wait(self, seconds: float | None = None) -> bool:
        """Sleep up to ``seconds``; returns True as soon as cancellation is requested."""
        with _SIGNALS:
            if self._cancelled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(seconds) or self._cancelled


@dataclass(frozen=True)
class ExecutionContext:
    """What a handler knows about the occurrence it runs."""

    task_id: str
    occurrence_id: str  # stable across retries and takeovers: use it as an idempotency key
    execution_token: str
    sequence: int
    attempt: int
    trigger: str  # cron | manual
    source: str | None
    scheduled_minute: int | None
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    status: AttemptStatus
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class ExecutionRequest:
    task: Any  # TaskDefinition (typed loosely to keep executors free of the model's imports)
    handler: Mapping[str, Any]
    context: ExecutionContext
    signal: CancelSignal
    hooks: Any  # runtime.hooks.Hooks


class Executor(Protocol):
    kind: str

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return the normalised handler config or raise ConfigError naming the field."""

    def execute(self, request: ExecutionRequest) -> Outcome:
        """Run one attempt. Must return promptly once ``request.signal`` is set."""
