"""Task definitions and their slots.

Every change to a task bumps ``scheduler_meta.tasks_version`` in the same transaction, so
a node learns that something changed with one read per tick (``tick_snapshot``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError

from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import executions, scheduler_meta, slots, tasks
from scheduler_core.errors import (
    DatabaseError,
    DbSaveFailedError,
    InvalidStoredValueError,
    SchedulerError,
    TaskAlreadyExistsError,
)
from scheduler_core.model import DECLARED, TaskDefinition, declared_json, validate_task
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.dialect import StatementCache, greatest, insert_ignore
from scheduler_core.store.teams import check_team_exists, freeze_history
from scheduler_core.store.transactions import AutocommitLine, one_row, read, write
from scheduler_core.task_policies import Pause
from scheduler_core.task_schema import DeclaredField, Widget

TASKS_VERSION = "tasks_version"
TICKED_THROUGH = "ticked_through"  # the last minute a node of the cluster planned (0: none yet)
T = TypeVar("T")


@dataclass(frozen=True)
class TickSnapshot:
    now_ms: int  # database clock
    tasks_version: int  # bumped by every task change
    earliest_lease_until: int | None = None  # of running executions (asked with leases=True)
    latest_queued: int | None = None  # created_at of the newest queued execution (asked with leases=True)
    ticked_through: int = 0  # the last minute some node planned (asked with leases=True)

    @property
    def leases_expired(self) -> bool:
        """Some running execution's lease is over: the expiry scan has work."""
        return self.earliest_lease_until is not None and self.earliest_lease_until < self.now_ms


def task_from_row(row: Row[Any] | Mapping[str, Any]) -> TaskDefinition:
    """Parse a stored task; raises InvalidStoredValueError naming the task when unreadable."""
    data = row._mapping if isinstance(row, Row) else row
    try:
        handler, params = data["handler"], data["params"]
        if handler is not None and not isinstance(handler, Mapping):
            raise ValueError("handler is not a JSON object")
        if params is not None and not isinstance(params, Mapping):
            raise ValueError("params is not a JSON object")
        declared = {f.name: _from_column(f, data[f.name]) for f in DECLARED}
        return validate_task(TaskDefinition(
            **declared, revision=to_ms(data["revision"], "revision"),
            created_at=to_ms(data["created_at"], "created_at"),
            updated_at=to_ms(data["updated_at"], "updated_at"), paused=_pause_from(data),
            runs_counted=to_ms(data["runs_counted"], "runs_counted"),
            limit_reached_at=optional_ms(data["limit_reached_at"], "limit_reached_at")), stored=True)
    except (SchedulerError, ValueError, TypeError, KeyError) as exc:
        raise InvalidStoredValueError(f"stored task {data.get('id')!r} is unreadable: {exc}",
                                      task_id=data.get("id")) from exc


def _pause_from(data: Any) -> Pause | None:
    if data["paused_at"] is None:
        return None
    return Pause(to_ms(data["paused_at"], "paused_at"), optional_ms(data["paused_until"], "paused_until"),
                 data["paused_by"], data["paused_reason"])


def _from_column(declared: DeclaredField, value: Any) -> Any:
    """A column's value as the definition holds it (a boolean is 0 / 1 on SQLite and MariaDB)."""
    return bool(value) if declared.spec.widget is Widget.CHECK else value


def _columns(task: TaskDefinition) -> dict[str, Any]:
    """The declared columns, one per declared field (a pause is not declared: pause / resume change it)."""
    columns = declared_json(task)
    del columns["id"]
    return columns


def _saving(task_id: str, save: Callable[[], T]) -> T:
    """A failed task write is DB_SAVE_FAILED (``hai:scheduler:026``) naming the task."""
    try:
        return save()
    except DatabaseError as exc:
        raise DbSaveFailedError(f"saving task {task_id!r} failed: {exc.message}", task_id=task_id) from exc


class TaskRepository:
    """Reads and writes ``tasks``, ``slots`` and the tasks version."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._snapshots = StatementCache()  # the tick's statement, built once

    def tick_snapshot(self, leases: bool = False, line: AutocommitLine | None = None) -> TickSnapshot:
        """One statement: the DB clock and the tasks version; with ``leases`` also the earliest
        lease deadline of the running executions, so that an idle tick knows without a second
        statement whether the expiry scan has anything to do (an index lookup on
        ``(status, lease_until)``, evaluated in the same statement as the clock). On ``line``
        (the node's held autocommit connection) it is one round trip."""
        query = self._snapshots.get(f"snapshot:{leases}", lambda: select(*self.snapshot_columns(leases)))
        if line is not None:
            return self.snapshot_from(line.one(query))
        return read(self.engine, lambda conn: self.snapshot_from(conn.execute(query).one()))

    @staticmethod
    def snapshot_columns(leases: bool) -> list[Any]:
        """The tick snapshot as SQL expressions (another statement may carry them, e.g. the
        heartbeat's UPDATE ... RETURNING)."""
        version = select(scheduler_meta.c.value).where(scheduler_meta.c.name == TASKS_VERSION).scalar_subquery()
        columns: list[Any] = [db_now_ms(), version]
        if leases:  # index probes on (status, lease_until) and (status, created_at, ...)
            columns.append(select(func.min(executions.c.lease_until))
                           .where(executions.c.status == ExecutionStatus.RUNNING).scalar_subquery())
            columns.append(select(func.max(executions.c.created_at))
                           .where(executions.c.status == ExecutionStatus.QUEUED).scalar_subquery())
            columns.append(select(scheduler_meta.c.value).where(scheduler_meta.c.name == TICKED_THROUGH)
                           .scalar_subquery())
        return columns

    @staticmethod
    def snapshot_from(row: Sequence[Any]) -> TickSnapshot:
        earliest = optional_ms(row[2], "lease_until") if len(row) > 2 else None
        queued = optional_ms(row[3], "created_at") if len(row) > 3 else None
        ticked = to_ms(row[4] or 0, TICKED_THROUGH) if len(row) > 4 else 0
        return TickSnapshot(to_ms(row[0], "db_now_ms"), to_ms(row[1] or 0, TASKS_VERSION), earliest, queued, ticked)

    def load_all(self) -> tuple[int, list[TaskDefinition]]:
        """Every stored task and the tasks version they correspond to (one snapshot).

        Raises InvalidStoredValueError if any stored task is unreadable.
        """

        def work(conn: Connection) -> tuple[int, list[Row[Any]]]:
            version = conn.execute(select(scheduler_meta.c.value)
                                   .where(scheduler_meta.c.name == TASKS_VERSION)).scalar()
            return to_ms(version or 0, TASKS_VERSION), list(conn.execute(select(tasks).order_by(tasks.c.id)))

        version, rows = read(self.engine, work)
        return version, [task_from_row(row) for row in rows]

    @staticmethod
    def version(conn: Connection) -> int:
        """The tasks version now: unchanged since a read means no task changed since then."""
        value = conn.execute(select(scheduler_meta.c.value).where(scheduler_meta.c.name == TASKS_VERSION)).scalar()
        return to_ms(value or 0, TASKS_VERSION)

    def get(self, task_id: str, conn: Connection | None = None) -> TaskDefinition | None:
        if conn is not None:
            row = conn.execute(select(tasks).where(tasks.c.id == task_id)).first()
        else:
            row = read(self.engine, lambda c: c.execute(select(tasks).where(tasks.c.id == task_id)).first())
        return task_from_row(row) if row is not None else None

    def get_many(self, conn: Connection, task_ids: list[str]) -> dict[str, TaskDefinition | Exception]:
        """Definitions by id; an unreadable one maps to its error (the caller interrupts)."""
        found: dict[str, TaskDefinition | Exception] = {}
        for row in conn.execute(select(tasks).where(tasks.c.id.in_(task_ids))):
            try:
                found[row.id] = task_from_row(row)
            except InvalidStoredValueError as exc:
                found[row.id] = exc
        return found

    def insert(self, task: TaskDefinition, conn: Connection | None = None) -> TaskDefinition:
        """Insert a new task (revision 1) and its slot. TaskAlreadyExistsError on a taken id."""

        def work(c: Connection) -> TaskDefinition:
            check_team_exists(c, task.team)
            now = db_statement_now_ms()  # one reading: created_at = updated_at
            try:
                with c.begin_nested():
                    c.execute(tasks.insert().values(id=task.id, revision=1, created_at=now, updated_at=now,
                                                    **_columns(task)))
            except IntegrityError:
                raise TaskAlreadyExistsError(f"task {task.id!r} already exists", task_id=task.id) from None
            c.execute(insert_ignore(c, slots, [{"task_id": task.id, "occurrence_id": None,
                                                "execution_token": None, "updated_at": now}]))
            self._bump_version(c)
            stored = self.get(task.id, c)
            assert stored is not None
            return stored

        if conn is not None:
            return work(conn)
        return _saving(task.id, lambda: write(self.engine, work))

    def declare(self, declared: Sequence[TaskDefinition]) -> None:
        """Store each declared task that is not stored yet; one that is stored must be the same
        definition, else TaskAlreadyExistsError (and nothing is written).

        One transaction, safe when several nodes declare the same tasks at the same instant: the
        insert skips a row another node inserted meanwhile (insert-or-ignore waits for that
        node's commit), and the row read back is then compared -- never "already exists" for
        the same definition.
        """

        def work(conn: Connection) -> None:
            now = db_statement_now_ms()
            inserted = False
            for task in declared:
                if self.get(task.id, conn) is None:
                    check_team_exists(conn, task.team)
                    conn.execute(insert_ignore(conn, tasks, [{"id": task.id, "revision": 1, "created_at": now,
                                                               "updated_at": now, **_columns(task)}]))
                    inserted = True
                stored = self.get(task.id, conn)
                if stored is None or not stored.same_definition(task):
                    raise TaskAlreadyExistsError(f"task {task.id!r} is declared and stored with a different "
                                                 "definition", task_id=task.id)
                conn.execute(insert_ignore(conn, slots, [{"task_id": task.id, "occurrence_id": None,
                                                          "execution_token": None, "updated_at": now}]))
            if inserted:
                self._bump_version(conn)

        if declared:
            _saving(declared[0].id, lambda: write(self.engine, work))

    def update(self, task: TaskDefinition, expected_revision: int) -> TaskDefinition | None:
        """Replace a task's fields if its revision is still ``expected_revision``.

        Changes every declared column, ``revision`` (+1) and ``updated_at`` (monotonic).
        Returns the stored task, or None when the task is gone or its revision moved on.
        Enabling a task that disabled itself on reaching its ``max_runs`` starts a new count.
        """

        def work(conn: Connection) -> TaskDefinition | None:
            was = conn.execute(select(tasks.c.team).where(tasks.c.id == task.id,
                                                          tasks.c.revision == expected_revision)).scalar()
            if was is None:
                return None
            if was != task.team:  # a move: its history stays the team it ran under
                check_team_exists(conn, task.team)
            if task.enabled:  # first: MySQL would read the cleared marker in one UPDATE's later SET
                conn.execute(update(tasks).where(tasks.c.id == task.id, tasks.c.revision == expected_revision,
                                                 tasks.c.limit_reached_at.is_not(None))
                             .values(runs_counted=0, limit_reached_at=None))
            changed = conn.execute(
                update(tasks)
                .where(tasks.c.id == task.id, tasks.c.revision == expected_revision)
                .values(revision=tasks.c.revision + 1,
                        updated_at=greatest(conn, db_now_ms(), tasks.c.updated_at + 1), **_columns(task)))
            if not one_row(changed, f"updating task {task.id!r}"):
                return None
            if was != task.team:
                freeze_history(conn, task.id, was)
            self._bump_version(conn)
            return self.get(task.id, conn)

        return _saving(task.id, lambda: write(self.engine, work))

    def delete(self, task_id: str, revision: int | None = None) -> bool:
        """Delete a task (only at ``revision`` when given) and its slot if the slot is free.

        A slot held by an unknown execution survives, so a re-registered task with the
        same id still waits for the operator's decision. Returns whether a task was deleted.
        """

        def work(conn: Connection) -> bool:
            condition = [tasks.c.id == task_id]
            if revision is not None:
                condition.append(tasks.c.revision == revision)
            team = conn.execute(select(tasks.c.team).where(*condition)).scalar()
            if team is None or not one_row(conn.execute(delete(tasks).where(*condition)), f"deleting task {task_id!r}"):
                return False
            freeze_history(conn, task_id, team)
            conn.execute(delete(slots).where(slots.c.task_id == task_id, slots.c.occurrence_id.is_(None)))
            self._bump_version(conn)
            return True

        return _saving(task_id, lambda: write(self.engine, work))

    def pause(self, task_id: str, until_ms: int | None, by: str | None, reason: str | None) -> TaskDefinition | None:
        """Pause a task (no cron occurrences until ``resume`` or ``until_ms``): sets the pause
        columns (``paused_at`` from the DB clock), bumps revision, ``updated_at`` and the tasks
        version. None when the task is gone."""
        return self._set_pause(task_id, {"paused_at": db_now_ms(), "paused_until": until_ms, "paused_by": by,
                                         "paused_reason": reason})

    def resume(self, task_id: str) -> TaskDefinition | None:
        """Clear a task's pause (as ``pause``, the other way)."""
        return self._set_pause(task_id, {"paused_at": None, "paused_until": None, "paused_by": None,
                                         "paused_reason": None})

    def _set_pause(self, task_id: str, values: dict[str, Any]) -> TaskDefinition | None:
        def work(conn: Connection) -> TaskDefinition | None:
            changed = conn.execute(update(tasks).where(tasks.c.id == task_id).values(
                revision=tasks.c.revision + 1, updated_at=greatest(conn, db_now_ms(), tasks.c.updated_at + 1),
                **values))
            if not one_row(changed, f"pausing task {task_id!r}"):
                return None
            self._bump_version(conn)
            return self.get(task_id, conn)

        return _saving(task_id, lambda: write(self.engine, work))

    def advance_watermark(self, minute_ms: int) -> None:
        """The cluster planned ``minute_ms``: ``ticked_through`` moves forward to it, never back."""
        write(self.engine, lambda conn: conn.execute(
            update(scheduler_meta).where(scheduler_meta.c.name == TICKED_THROUGH, scheduler_meta.c.value < minute_ms)
            .values(value=minute_ms)))

    def count(self) -> int:
        return int(read(self.engine, lambda c: c.execute(select(func.count()).select_from(tasks)).scalar_one()))

    @staticmethod
    def _bump_version(conn: Connection) -> None:
        bump_tasks_version(conn)


def bump_tasks_version(conn: Connection) -> None:
    """Some task changed, in ``conn``'s transaction: every node reloads the definitions."""
    conn.execute(update(scheduler_meta).where(scheduler_meta.c.name == TASKS_VERSION)
                 .values(value=scheduler_meta.c.value + 1))
