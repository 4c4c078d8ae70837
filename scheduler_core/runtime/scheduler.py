"""The public ``Scheduler``: lifecycle, task registry, triggers, logs and the operator API."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Engine

from scheduler_core.config import SchedulerConfig
from scheduler_core.db import prepare_engine
from scheduler_core.db.galera import check_galera
from scheduler_core.db.outage import Outage
from scheduler_core.errors import (
    AlreadyRunningError,
    ConfigError,
    ConflictError,
    ExecutionNotFoundError,
    InitFailedError,
    NotInitializedError,
    NotRunningError,
    SchedulerError,
    TaskNotFoundError,
)
from scheduler_core.executors import Executor, ExecutorRegistry
from scheduler_core.model import UPDATABLE_FIELDS, ExecutionLog, TaskDefinition, validate_task
from scheduler_core.runtime.backfill import BackfillResult, backfill
from scheduler_core.runtime.clock_skew import SkewWatch
from scheduler_core.runtime.clock_watch import jump_tolerance_ms
from scheduler_core.runtime.context import RuntimeContext
from scheduler_core.runtime.execution_operations import ExecutionOperations, check_log_filter
from scheduler_core.runtime.hooks import Hooks
from scheduler_core.runtime.manual_triggers import claim_manual, occurrence_id_for
from scheduler_core.runtime.node import Node
from scheduler_core.runtime.schedule_description import ScheduleDescription, describe
from scheduler_core.runtime.startup import check_pool, connections_needed, migrate, validated_declared
from scheduler_core.runtime.task_operations import TaskOperations, TaskState
from scheduler_core.store import (
    ExecutionRepository,
    LogRepository,
    NodeInfo,
    NodeRepository,
    TaskRepository,
)
from scheduler_core.store.retention import PruneResult
from scheduler_core.store.transactions import read
from scheduler_core.store.users import AuditRepository
from scheduler_core.validation import check_id, check_ms, check_optional_id, check_page

TRIGGER_POLL_S = 0.2
MEASURE_CLOCKS_MAX_S = 15.0  # Galera: how long start() watches the other nodes' heartbeats (runtime/clock_skew.py)


class Scheduler:
    """A scheduler node bound to one database engine. Not a singleton: make as many as you need."""

    def __init__(self, engine: Engine, config: SchedulerConfig | None = None, *,
                 hooks: Mapping[str, Any] | object | None = None, tasks: Iterable[TaskDefinition] | None = None,
                 executors: list[Executor] | None = None) -> None:
        if config is not None and not isinstance(config, SchedulerConfig):
            raise ConfigError("config", "must be a SchedulerConfig")
        self._engine = engine
        self._config = config or SchedulerConfig()
        self._hooks = Hooks(hooks)
        self._declared = list(tasks or ())
        self._executors = ExecutorRegistry(executors)
        self._lock = threading.RLock()
        self._ctx: RuntimeContext | None = None
        self._node: Node | None = None
        self._snapshot: dict[str, TaskDefinition] = {}
        self._snapshot_version: int | None = None  # the tasks version _snapshot was read at (None: changed since)
        self._refresh_lock = threading.Lock()
        self._closing = threading.Event()
        self._tick_listeners: list[Callable[[int], None]] = []
        # Since when this process finds the database unreachable: the node's parts report to it,
        # /healthz reads it (db/outage.py). One per scheduler, kept across init and close.
        self.outage = Outage(f"node {self._config.node_id}")
        self.execution = ExecutionOperations(self.context, engine, self._config)
        self.task_ops = TaskOperations(self.context)

    # --- properties -----------------------------------------------------------------

    @property
    def config(self) -> SchedulerConfig:
        return self._config

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    @property
    def tasks(self) -> tuple[TaskDefinition, ...]:
        """The last good snapshot of the stored definitions, sorted by id."""
        return tuple(self._snapshot[k] for k in sorted(self._snapshot))

    @property
    def is_initialized(self) -> bool:
        return self._ctx is not None

    @property
    def is_running(self) -> bool:
        return self._node is not None and self._node.accepting

    @property
    def engine(self) -> Engine:
        return self._engine

    def context(self) -> RuntimeContext:
        if self._ctx is None:
            raise NotInitializedError("the scheduler is not initialised; call init() first")
        return self._ctx

    # --- lifecycle --------------------------------------------------------------------

    def init(self) -> None:
        """Load every stored task and the declared ones; all-or-nothing (INIT_FAILED)."""
        with self._lock:
            if self._ctx is not None:
                return
            self._closing.clear()
            try:
                self._init()
            except SchedulerError as exc:
                self._ctx, self._snapshot = None, {}
                raise InitFailedError(f"init failed: {exc}", cause=exc) from exc

    def _init(self) -> None:
        prepare_engine(self._engine)
        check_pool(self._engine, self._config)
        galera = check_galera(self._engine)  # a Galera node set up against a rule: GaleraSettingError
        migrate(self._engine, self._config)
        tasks_repo = TaskRepository(self._engine)
        tasks_repo.declare(validated_declared(self._declared, self._executors.validate))
        executions = ExecutionRepository(self._engine, self._config.node_id, self._config.lease_ms)
        ctx = RuntimeContext(self._config, tasks_repo, executions, LogRepository(self._engine), self._executors,
                             self._hooks, self._forget, self.outage)
        self._load_snapshot(tasks_repo)
        ctx.clock.observe(tasks_repo.tick_snapshot().now_ms)
        if galera is not None:  # each Galera node has its own clock: runtime/clock_skew.py
            ctx.skew = SkewWatch(self._config.node_id, jump_tolerance_ms(self._config.lease_ms))
        ctx.leases.start()
        self._ctx = ctx

    def connections_needed(self) -> int:
        """The connections this node may hold at once (runtime/startup.py)."""
        return connections_needed(self._config)

    def start(self) -> None:
        with self._lock:
            ctx = self.context()
            if self._node is not None:
                raise AlreadyRunningError("the scheduler is already running")
            if ctx.skew is not None:  # Galera: the other nodes' database clocks, measured first
                beat = self._config.heartbeat_interval_ms  # (a node behind looks older: a wider window)
                ctx.skew.refuse(ctx.skew.measure(lambda: ctx.nodes.alive(3 * beat + 60_000),
                                                 min(1.5 * beat / 1000, MEASURE_CLOCKS_MAX_S)))
            self._node = Node(ctx, NodeRepository(self._engine), self._reload)
            self._node.listeners = self._tick_listeners
            self._node.start()

    def stop(self) -> None:
        """Stop claiming new work; executions already running go on to their end."""
        with self._lock:
            if self._node is None:
                raise NotRunningError("the scheduler is not running")
            node, self._node = self._node, None
        node.stop()
        node.shutdown_pool()

    def close(self) -> None:
        """Stop intake, cancel running handlers, wait for every runner to exit, clear state."""
        with self._lock:
            ctx = self._ctx
            if ctx is None:
                return
            self._closing.set()
            node, self._node = self._node, None
            if node is not None:
                node.stop()
            ctx.cancel_all("closing")
            if node is not None:
                node.shutdown_pool()
            ctx.wait_idle()
            ctx.leases.stop()
            self._ctx, self._snapshot = None, {}

    def add_tick_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(db_now_ms)`` on every tick of this node (e.g. notification rounds).

        Listeners run on the tick thread: they must return quickly (start work elsewhere).
        """
        self._tick_listeners.append(listener)

    # --- hooks ------------------------------------------------------------------------

    def set_hooks(self, hooks: Mapping[str, Any] | object) -> None:
        self._hooks = Hooks(hooks)
        if self._ctx is not None:
            self._ctx.hooks = self._hooks

    def clear_hooks(self) -> None:
        self.set_hooks(None)

    # --- definitions ----------------------------------------------------------------------

    def register(self, task: TaskDefinition) -> TaskDefinition:
        ctx = self.context()
        if not isinstance(task, TaskDefinition):
            raise ConfigError("task", "must be a TaskDefinition")
        check_id(task.id, "id", url_path=True)  # new ids only: stored tasks stay readable
        stored = ctx.tasks.insert(validate_task(task, self._executors.validate))
        self._snapshot = {**self._snapshot, stored.id: stored}  # published only after the write
        self._snapshot_version = None
        return stored

    def unregister(self, task_id: str) -> None:
        ctx = self.context()
        check_id(task_id, "task_id")
        if not ctx.tasks.delete(task_id):
            raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
        ctx.task_deleted(task_id)

    def update_task(self, task_id: str, *, expected_updated_at: int | None = None, **changes: Any) -> TaskDefinition:
        """Change some fields (omitted = unchanged; ``retry=None`` / ``handler=None`` clear them)."""
        ctx = self.context()
        check_id(task_id, "task_id")
        for name in changes:
            if name not in UPDATABLE_FIELDS:
                raise ConfigError(name, "is not an updatable task field")
        if expected_updated_at is not None:
            check_ms(expected_updated_at, "expected_updated_at")
        current = ctx.tasks.get(task_id)
        if current is None:
            raise TaskNotFoundError(f"task {task_id!r} not found", task_id=task_id)
        if expected_updated_at is not None and expected_updated_at != current.updated_at:
            raise ConflictError(f"task {task_id!r} changed since it was read (updated_at {current.updated_at})",
                                task_id=task_id)
        merged = validate_task(replace(current, **changes), self._executors.validate)
        stored = ctx.tasks.update(merged, current.revision)
        if stored is None:
            raise ConflictError(f"task {task_id!r} changed concurrently; read it again", task_id=task_id)
        self._snapshot = {**self._snapshot, stored.id: stored}
        self._snapshot_version = None
        return stored

    def pause(self, task_id: str, reason: str | None = None, until_ms: int | None = None,
              by: str | None = None) -> TaskDefinition:
        """No cron occurrences of the task until ``resume`` or ``until_ms`` (DB clock); who, why and
        until are stored with it. Running executions go on; manual triggers still run."""
        return self.task_ops.pause(task_id, reason, until_ms, by)

    def resume(self, task_id: str, by: str | None = None) -> TaskDefinition:
        return self.task_ops.resume(task_id, by)

    def task_state(self, task_id: str) -> TaskState:
        """``state`` (ok / paused / disabled / blocked), ``blocked_by``, ``skipped_since``,
        ``last_outcome``."""
        return self.task_ops.state(task_id)

    def backfill(self, task_id: str, start_ms: int, end_ms: int, *, by: str | None = None,
                 reason: str | None = None, dry_run: bool = False) -> BackfillResult:
        """Run the task's past cron occurrences from ``start_ms`` through ``end_ms`` (DB clock, before
        the current minute), each once, one at a time in minute order (``runtime/backfill.py``)."""
        return backfill(self.context(), task_id, start_ms, end_ms, by=by, reason=reason, dry_run=dry_run)

    def describe(self, task_id: str) -> ScheduleDescription:
        """The task's schedule described: next fire times, last runs, the counters of what did not
        run (``runtime/schedule_description.py``)."""
        return describe(self.task_ops, AuditRepository(self._engine), task_id)

    def refresh_tasks(self, if_changed: bool = False) -> tuple[TaskDefinition, ...]:
        """Re-read stored definitions (``if_changed``: only if the tasks version moved since the last
        read, else one statement: a page of every task); concurrent calls share one read."""
        ctx = self.context()
        version = read(ctx.executions.engine, TaskRepository.version) if if_changed else None
        if self._refresh_lock.acquire(blocking=False):
            try:
                self._reload(version)
            finally:
                self._refresh_lock.release()
        else:
            with self._refresh_lock:  # someone else is reading: wait for their result
                pass
        return self.tasks

    def _reload(self, version: int | None = None) -> dict[str, TaskDefinition]:
        """The stored definitions, read again unless ``version`` is the tasks version they were
        read at (a node's first tick after ``init()``: 10,000 definitions are not read and
        validated twice)."""
        if version is None or version != self._snapshot_version:
            self._load_snapshot(self.context().tasks)
        return dict(self._snapshot)

    def _load_snapshot(self, repo: TaskRepository) -> None:
        # The version is read before the rows: rows newer than it only make the next tick read again.
        version, stored = repo.load_all()
        self._snapshot = {t.id: t for t in stored}
        self._snapshot_version = version

    def _forget(self, task_id: str) -> None:
        self._snapshot = {k: v for k, v in self._snapshot.items() if k != task_id}
        self._snapshot_version = None

    # --- triggers and logs ------------------------------------------------------------------

    def trigger(self, task_id: str, source: str | None = None, idempotency_key: str | None = None) -> ExecutionLog:
        """Run a task now, competing for its slot; waits for the outcome and returns it.

        With ``idempotency_key`` the occurrence id is derived from (task, key): repeating the
        call returns the same record instead of running again.
        """
        occurrence_id, runner = claim_manual(self.context(), task_id, source, idempotency_key)
        if runner is not None:
            return runner.run()
        return self._wait_for_record(occurrence_id)

    def submit(self, task_id: str, source: str | None = None, idempotency_key: str | None = None) -> str:
        """Run a task now in the background; return its occurrence id once the claim is committed.

        Same claim as ``trigger`` (slot busy: journaled ``skipped``; a repeated
        ``idempotency_key``: the existing occurrence's id, nothing runs again), but the caller
        does not wait: the run is a registered runner on its own thread, so ``close()``
        cancels it and waits for it like any other.
        """
        occurrence_id, runner = claim_manual(self.context(), task_id, source, idempotency_key)
        if runner is not None:
            if self._closing.is_set():
                runner.signal.cancel("closing")  # close() already cancelled the others: end before starting
            try:
                threading.Thread(target=runner.run, name=f"hai-submit-{occurrence_id[:8]}", daemon=True).start()
            except RuntimeError:  # no thread: the lease is no longer renewed, and expiry recovers the row
                self.context().unregister_runner(runner)
                raise
        return occurrence_id

    def repeated_occurrence(self, task_id: str, idempotency_key: str | None) -> str | None:
        """The journaled occurrence a manual trigger of ``task_id`` with ``idempotency_key`` would
        return instead of running again; None without a key, with a key ``submit`` refuses, or when
        no occurrence has that key yet. (The answer may be stale by the time ``submit`` claims.)"""
        try:
            key = check_optional_id(idempotency_key, "idempotency_key")
        except ConfigError:
            return None  # submit refuses this key: nothing can be repeated
        if key is None:
            return None
        occurrence_id = occurrence_id_for(task_id, key)
        try:
            self.execution.get(occurrence_id)
        except ExecutionNotFoundError:
            return None
        return occurrence_id

    def _wait_for_record(self, occurrence_id: str) -> ExecutionLog:
        """Somebody journaled this occurrence (a repeat key, or slot busy): report its outcome."""
        while True:
            execution = self.execution.get(occurrence_id)
            if execution.is_terminal or self._closing.wait(TRIGGER_POLL_S):
                return ExecutionLog.of_journal(execution)

    def nodes(self) -> list[NodeInfo]:
        """Every node that ever reported, most recent heartbeat first (for dashboards)."""
        self.context()
        return NodeRepository(self._engine).list()

    def prune_logs(self) -> int:
        """Apply the retention settings (``max_logs``, ``retention_days``) to the log table now.

        Only log rows go; the journal keeps every attempt. The node also does this about every
        ten minutes, and there a failure only warns. Returns the number of rows deleted.
        """
        config = self._config
        if config.max_logs is None and config.retention_days is None:
            return 0
        return self.context().logs.prune(config.max_logs, config.retention_days)

    def prune_journal(self) -> PruneResult:
        """Apply journal retention (``journal_retention_days``) now: finished occurrences
        unchanged that long, and their attempt logs, leave in batches (docs/semantics.md,
        "Journal retention"). The node also does this about every ten minutes, and there a
        failure only warns. Nothing happens when the setting is None."""
        days = self._config.journal_retention_days
        if days is None:
            return PruneResult()
        return self.context().journal_retention.prune(days, max_batches=1_000_000)

    def get_logs(self, task_id: str | None = None, status: str | None = None, trigger_source: str | None = None,
                 started_after: int | None = None, started_before: int | None = None, limit: int = 50,
                 offset: int = 0) -> list[ExecutionLog]:
        ctx = self.context()
        check_page(limit, offset)
        where = check_log_filter(task_id, status, trigger_source, started_after, started_before)
        return ctx.logs.query(where, limit, offset)

