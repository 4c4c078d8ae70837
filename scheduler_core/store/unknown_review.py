"""Reads behind the unknown review: unknown executions of a filter, oldest change first, and the
captured set a bulk resolution acts on. Served by the (status, updated_at) index; the task and
reason filters narrow the unknown rows only. Nothing here writes: each row of a bulk resolution
is settled by ``ExecutionRepository.resolve_unknown`` (a compare-and-set on its version)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.engine import Connection, Engine

from scheduler_core.db.clock import to_ms
from scheduler_core.db.tables import executions
from scheduler_core.model import Execution
from scheduler_core.store.executions import execution_from_row
from scheduler_core.store.transactions import read


@dataclass(frozen=True)
class UnknownFilter:
    """Unknown executions, optionally of one task and one reason (exact matches)."""

    task_id: str | None = None
    reason: str | None = None

    def condition(self) -> ColumnElement[bool]:
        parts = [executions.c.status == "unknown"]
        if self.task_id is not None:
            parts.append(executions.c.task_id == self.task_id)
        if self.reason is not None:
            parts.append(executions.c.reason == self.reason)
        return and_(*parts)


@dataclass(frozen=True)
class UnknownSet:
    """A captured set: rows with (updated_at, occurrence_id) <= (bound_at, bound_id) (``bound_id``
    None: every id at bound_at), how many there were, and whether more matched than it takes."""

    bound_at: int
    bound_id: str | None
    count: int
    more: bool = False

    def condition(self) -> ColumnElement[bool]:
        if self.bound_id is None:
            return executions.c.updated_at <= self.bound_at
        return and_(executions.c.updated_at <= self.bound_at, or_(
            executions.c.updated_at < self.bound_at, executions.c.occurrence_id <= self.bound_id))


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
        base = and_(where.condition(), executions.c.updated_at <= cutoff)
        edge = (select(executions.c.updated_at, executions.c.occurrence_id).where(base)
                .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(2).offset(at_most - 1))

        def work(conn: Connection) -> UnknownSet:
            rows = conn.execute(edge).all()
            bound = UnknownSet(cutoff, None, 0)
            if rows:  # more than at_most rows: the set ends at the at_most-th oldest
                bound = UnknownSet(to_ms(rows[0][0], "updated_at"), str(rows[0][1]), 0)
            inside = select(executions.c.occurrence_id).where(where.condition(), bound.condition())
            count = conn.execute(select(func.count()).select_from(inside.subquery())).scalar_one()
            return UnknownSet(bound.bound_at, bound.bound_id, int(count), more=len(rows) > 1)

        return read(self.engine, work)

    def inside(self, where: UnknownFilter, bound: UnknownSet, after: tuple[int, str] | None,
               limit: int) -> list[Execution]:
        """Rows of ``where`` still inside ``bound``, oldest first, strictly after the key ``after``."""
        conditions = [where.condition(), bound.condition()]
        if after is not None:
            key_at, key_id = after
            conditions.append(and_(executions.c.updated_at >= key_at, or_(
                executions.c.updated_at > key_at, executions.c.occurrence_id > key_id)))
        query = (select(executions).where(*conditions)
                 .order_by(executions.c.updated_at, executions.c.occurrence_id).limit(limit))
        return read(self.engine, lambda conn: [execution_from_row(r) for r in conn.execute(query)])
