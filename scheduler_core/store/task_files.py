"""Tasks created by a task file (``hai-scheduler tasks apply``): ``tasks.managed_by`` (migration
0011) names the file's source; ``tasks apply --prune`` deletes only tasks of its own source."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.tables import tasks
from scheduler_core.model import TaskDefinition
from scheduler_core.store.tasks import TaskRepository
from scheduler_core.store.transactions import read, write


class TaskFileRepository:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tasks = TaskRepository(engine)

    def create(self, task: TaskDefinition, source: str) -> TaskDefinition:
        """Insert ``task`` (revision 1, its slot, the tasks version bumped) marked as managed by
        ``source``, in one transaction. TaskAlreadyExistsError on a taken id (nothing written)."""

        def work(conn: Connection) -> TaskDefinition:
            stored = self.tasks.insert(task, conn)
            conn.execute(update(tasks).where(tasks.c.id == task.id).values(managed_by=source))
            return stored

        return write(self.engine, work)

    def sources(self) -> dict[str, str | None]:
        """Every task id with the source that manages it (None: made otherwise). Changes nothing."""
        rows = read(self.engine, lambda conn: conn.execute(select(tasks.c.id, tasks.c.managed_by)).all())
        return {str(task_id): None if source is None else str(source) for task_id, source in rows}
