"""Bounded sets for bulk operator actions, by a table's (updated_at, id) key.

A bulk action (resolve every unknown execution of a filter, requeue every dead letter) first
*captures* its set: the oldest ``at_most`` matching rows changed at or before a cutoff, as a
bound on the key, and how many rows are inside it. The action then walks the rows inside the
bound in key order and settles each with a compare-and-set on its version, so rows that change
or arrive after the capture are left alone. Used by ``unknown_review.py`` (executions) and
``reach_queue_pages.py`` (the notification queue)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Column, ColumnElement, and_, func, or_, select
from sqlalchemy.engine import Connection

from scheduler_core.db.clock import to_ms


@dataclass(frozen=True)
class Captured:
    """Rows with (updated_at, id) <= (bound_at, bound_id) (``bound_id`` None: every id at
    bound_at), how many there were, and whether more matched than the set takes."""

    bound_at: int
    bound_id: str | None
    count: int
    more: bool = False


C = TypeVar("C", bound=Captured)


@dataclass(frozen=True)
class UpdatedKey:
    """A table's keyset order for captured sets: ``updated_at`` then its id column."""

    updated_at: Column[Any]
    id: Column[Any]

    def up_to(self, bound_at: int, bound_id: str | None) -> ColumnElement[bool]:
        """Inside a captured bound."""
        if bound_id is None:
            return self.updated_at <= bound_at
        return and_(self.updated_at <= bound_at, or_(self.updated_at < bound_at, self.id <= bound_id))

    def after(self, key: tuple[int, str]) -> ColumnElement[bool]:
        """Strictly after ``key`` in key order (the next page of a walk)."""
        key_at, key_id = key
        return and_(self.updated_at >= key_at, or_(self.updated_at > key_at, self.id > key_id))

    def capture(self, conn: Connection, where: ColumnElement[bool], cutoff: int, at_most: int,
                kind: type[C]) -> C:
        """The oldest ``at_most`` rows of ``where`` changed at or before ``cutoff``: their bound
        and count, as a ``kind`` (reads at most ``at_most + 1`` index entries)."""
        edge = (select(self.updated_at, self.id).where(where, self.updated_at <= cutoff)
                .order_by(self.updated_at, self.id).limit(2).offset(at_most - 1))
        rows = conn.execute(edge).all()
        bound_at, bound_id = cutoff, None
        if rows:  # more than at_most rows: the set ends at the at_most-th oldest
            bound_at, bound_id = to_ms(rows[0][0], "updated_at"), str(rows[0][1])
        inside = select(self.id).where(where, self.up_to(bound_at, bound_id))
        count = conn.execute(select(func.count()).select_from(inside.subquery())).scalar_one()
        return kind(bound_at, bound_id, int(count), more=len(rows) > 1)
