"""Which journal rows retention may delete (docs/semantics.md G8): the guard of
``settled.delete_retained``, also the condition of retention's creation-order read
(``store/retention.py``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, exists, or_
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from scheduler_core.db.clock import db_now_ms
from scheduler_core.db.tables import executions, slots
from scheduler_core.statuses import LogPersistenceStatus
from scheduler_core.store.journal.transitions import DELETE_RETAINED

DAY_MS = 86_400_000
KEY_DAYS_MIN = 30  # an idempotency key answers with its occurrence for at least this many days


def key_days(days: int) -> int:
    """How long a keyed manual trigger keeps its idempotency when journal rows live ``days``."""
    return max(days, KEY_DAYS_MIN)


class NotForTheIndex(FunctionElement[Any]):
    """A column the planner must not pick an index by: SQLite's unary ``+`` (its documented way
    to take a term away from index selection), the column itself elsewhere. Without it SQLite
    answered retention's walk through a status index and sorted every row after the position for
    each batch."""

    inherit_cache = True
    name = "not_for_the_index"

    def __init__(self, column: Any) -> None:
        super().__init__(column)
        self.type = column.type


@compiles(NotForTheIndex)
def _compile_column(element: NotForTheIndex, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(NotForTheIndex, "sqlite")
def _compile_sqlite(element: NotForTheIndex, compiler: Any, **kw: Any) -> str:
    return "+" + str(compiler.process(element.clauses, **kw))


def deletable(days: int, walk: bool = False) -> Any:
    """The rows retention may delete (``delete_retained``'s guard): settled, changed more than
    ``days`` ago (a keyed one: ``key_days``), no slot pointing at it, logs not pending. ``walk``:
    as a condition of retention's creation-order read, whose status and ``updated_at`` terms no
    planner may take for an index."""
    c = executions.c
    status, updated_at = (NotForTheIndex(c.status), NotForTheIndex(c.updated_at)) if walk else (c.status, c.updated_at)
    unkeyed_cutoff = db_now_ms() - days * DAY_MS
    keyed_cutoff = db_now_ms() - key_days(days) * DAY_MS
    slot_points_here = exists().where(slots.c.occurrence_id == c.occurrence_id)
    return and_(status.in_([str(s) for s in DELETE_RETAINED.source]), updated_at < unkeyed_cutoff,
                or_(c.idempotency_key.is_(None), updated_at < keyed_cutoff),
                or_(c.log_persistence.is_(None), c.log_persistence != LogPersistenceStatus.PENDING), ~slot_points_here)
