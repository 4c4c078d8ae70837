"""Reads behind the unknown review: unknown executions of a filter, oldest change first, and the
captured set a bulk resolution acts on. Served by the (status, updated_at) index; the task and
reason filters narrow the unknown rows only. Nothing here writes: each row of a bulk resolution
is settled by ``ExecutionRepository.resolve_unknown`` (a compare-and-set on its version)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, select
from sqlalchemy.engine import Engine

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.tables import executions
from scheduler_core.model import Execution
from scheduler_core.statuses import ExecutionStatus
from scheduler_core.store.captured_sets import Captured, UpdatedKey
from scheduler_core.store.executions import execution_from_row
from scheduler_core.store.teams import history_in
from scheduler_core.store.transactions import read


@dataclass(frozen=True)
class UnknownFilter:
    """Unknown executions of ``scope``'s teams, optionally of one task and one reason (exact matches)."""

    task_id: str | None = None
    reason: str | None = None
    scope: Scope = EVERY_TEAM

    def condition(self) -> ColumnElement[bool]:
        parts = [executions.c.status == ExecutionStatus.UNKNOWN]
        if self.task_id is not None:
            parts.append(executions.c.task_id == self.task_id)
        if self.reason is not None:
            parts.append(executions.c.reason == self.reason)
        return and_(*parts, *history_in(executions, self.scope))


_KEY = UpdatedKey(executions.c.updated_at, executions.c.occurrence_id)


@dataclass(frozen=True)
class UnknownSet(Captured):
    """A captured set of unknown executions, by (updated_at, occurrence_id) (store/captured_sets.py)."""

    def condition(self) -> ColumnElement[bool]:
        return _KEY.up_to(self.bound_at, self.bound_id)


class UnknownReviewQueries:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def oldest(self, where: UnknownFilter, limit: int) -> list[Execution]:
        """The ``limit`` unknown executions of ``where`` that changed longest ago."""
        query = (select(executions).where(where.condition())
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])

    def capture(self, where: UnknownFilter, cutoff: int, at_most: int) -> UnknownSet:
        """The oldest ``at_most`` rows of ``where`` changed at or before ``cutoff``, as a bound on
        (updated_at, occurrence_id), and the count inside it (reads at most ``at_most + 1`` entries)."""
        return read(self.engine, lambda conn: _KEY.capture(conn, where.condition(), cutoff, at_most, UnknownSet))

    def inside(self, where: UnknownFilter, bound: UnknownSet, after: tuple[int, str] | None,
               limit: int) -> list[Execution]:
        """Rows of ``where`` still inside ``bound``, oldest first, strictly after the key ``after``."""
        conditions = [where.condition(), bound.condition()]
        if after is not None:
            conditions.append(_KEY.after(after))
        query = (select(executions).where(*conditions)
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])
