"""What a runner needs from its node, in one object (no globals)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from scheduler_core.config import SchedulerConfig
from scheduler_core.db.outage import Outage
from scheduler_core.executors import CancelSignal, ExecutorRegistry
from scheduler_core.model import Execution, TaskDefinition
from scheduler_core.runtime.batching import OwnerWrites
from scheduler_core.runtime.clock_skew import SkewWatch
from scheduler_core.runtime.hooks import Hooks
from scheduler_core.runtime.leases import DbClockEstimate, LeaseKeeper
from scheduler_core.store import ExecutionRepository, LogRepository, NodeRepository, TaskRepository
from scheduler_core.store.handoff import HandoffRepository
from scheduler_core.store.retention import JournalRetention


class OwnedExecution(Protocol):
    """What the context reads of a runner's ``Ownership`` (runtime/runner.py)."""

    @property
    def execution(self) -> Execution: ...

    @property
    def token(self) -> str: ...


class RegisteredRunner(Protocol):
    """What the context and the node need of a registered runner (runtime/runner.py's Runner),
    declared here so that this module does not import runner.py, which imports it."""

    @property
    def owned(self) -> OwnedExecution: ...

    @property
    def signal(self) -> CancelSignal: ...

    @property
    def committing(self) -> bool: ...


class RuntimeContext:
    def __init__(self, config: SchedulerConfig, tasks: TaskRepository, executions: ExecutionRepository,
                 logs: LogRepository, executors: ExecutorRegistry, hooks: Hooks,
                 forget_task: Callable[[str], None], outage: Outage | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.tasks = tasks
        self.executions = executions
        self.logs = logs
        self.handoff = HandoffRepository(executions)  # queued and missed rows
        self.nodes = NodeRepository(executions.engine)
        self.journal_retention = JournalRetention(executions.engine)
        self.executors = executors
        self.hooks = hooks  # replaced whole by set_hooks / clear_hooks
        self.clock = DbClockEstimate()
        # Seconds without a primary: said once, on /healthz and in health(), by every part alike.
        self.outage = outage or Outage(f"node {config.node_id}")
        self.skew: SkewWatch | None = None  # Galera only: the other nodes' database clocks (runtime/clock_skew.py)
        self.leases = LeaseKeeper(executions, config.renew_interval_ms, config.lease_ms, self.outage)
        self.writes = OwnerWrites(executions, logs)  # group commits of begins and terminal commits
        self.forget_task = forget_task
        self.kinds = executors.available_kinds()  # found at init(): js only where Node.js is
        self._runners: dict[str, RegisteredRunner] = {}
        self._lock = threading.Lock()
        self.idle = threading.Condition(self._lock)

    @property
    def capabilities(self) -> frozenset[str]:
        """The handler kinds this node runs: hook only with an ``on_task_execute`` hook."""
        return self.kinds if self.hooks.on_task_execute is not None else self.kinds - {"hook"}

    def can_run(self, task: TaskDefinition) -> bool:
        """This node claims the task's occurrences: it runs its kind and serves its group."""
        group_ok = task.node_group is None or task.node_group in self.config.groups
        return group_ok and task.handler_kind in self.capabilities

    def capable_node_alive(self, task: TaskDefinition) -> bool:
        """Some live node (a heartbeat within three intervals) runs the task's kind and group."""
        _, alive = self.nodes.alive(3 * self.config.heartbeat_interval_ms)
        return any(node.can_run(task.handler_kind, task.node_group) for node in alive)

    def register_runner(self, runner: RegisteredRunner) -> None:
        with self._lock:
            self._runners[runner.owned.token] = runner
        self.leases.add(runner.owned.token, runner.signal)

    def unregister_runner(self, runner: RegisteredRunner) -> None:
        self.leases.remove(runner.owned.token)
        with self._lock:
            self._runners.pop(runner.owned.token, None)
            self.idle.notify_all()

    def runners(self) -> list[RegisteredRunner]:
        with self._lock:
            return list(self._runners.values())

    def task_deleted(self, task_id: str) -> None:
        """A task's definition is gone: drop it from the snapshot, cancel its running executions."""
        self.forget_task(task_id)
        for runner in self.runners():
            if runner.owned.execution.task_id == task_id:
                runner.signal.cancel("deleted")

    def cancel_all(self, reason: str) -> None:
        for runner in self.runners():
            runner.signal.cancel(reason)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no runner is left; then the group commits end (their connections back)."""
        with self._lock:
            idle = self.idle.wait_for(lambda: not self._runners, timeout)
        if idle:
            self.writes.drain()
        return idle
