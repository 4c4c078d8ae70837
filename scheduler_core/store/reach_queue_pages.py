"""The notification queue as the operator sees it: entries (safe metadata, never a body or a
recipient), counts, keyset pages of a filtered list, bulk requeue of dead letters, and the
verdicts (requeue a dead letter, resolve an unknown one), each a compare-and-set on the row's
version. Every read and verdict takes the caller's ``Scope``: a team member sees and settles only
their teams' rows (``team``: the team of the task an alert is about; NULL rows, about no one team,
only a global caller). ``QueueRepository`` (reach_queue.py) adds the writers: enqueue, claim,
owners' writes.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.sql import ColumnElement

from scheduler_core.access import EVERY_TEAM, Scope
from scheduler_core.db.clock import db_now_ms, optional_ms, to_ms
from scheduler_core.db.tables import reach_queue
from scheduler_core.statuses import DeliveryResolution, QueueStatus
from scheduler_core.store.captured_sets import Captured, UpdatedKey
from scheduler_core.store.dialect import greatest
from scheduler_core.store.totals import Tally
from scheduler_core.store.transactions import one_row, read, write

_KEY = UpdatedKey(reach_queue.c.updated_at, reach_queue.c.queue_id)


@dataclass(frozen=True)
class QueueEntry:
    """Safe metadata of a queued message: never its body or recipient."""

    queue_id: str
    provider: str
    template: str | None
    status: QueueStatus
    attempt_count: int
    max_attempts: int
    retry_delay_ms: int
    max_retry_delay_ms: int
    next_attempt_at: int
    locked_until: int | None
    last_failure: str | None
    message_id: str | None
    created_at: int
    updated_at: int
    last_error: str | None = None  # what went wrong last: "<class>: <short masked message>" (migration 0012)
    team: str | None = None  # the team whose task it is about; None: about no one team (migration 0027)


def entry_from_row(row: Row[Any]) -> QueueEntry:
    d = row._mapping
    return QueueEntry(
        queue_id=d["queue_id"], provider=d["provider"], template=d["template"], status=QueueStatus(d["status"]),
        attempt_count=int(d["attempt_count"]), max_attempts=int(d["max_attempts"]),
        retry_delay_ms=to_ms(d["retry_delay_ms"], "retry_delay_ms"),
        max_retry_delay_ms=to_ms(d["max_retry_delay_ms"], "max_retry_delay_ms"),
        next_attempt_at=to_ms(d["next_attempt_at"], "next_attempt_at"),
        locked_until=optional_ms(d["locked_until"], "locked_until"), last_failure=d["last_failure"],
        message_id=d["message_id"], created_at=to_ms(d["created_at"], "created_at"),
        updated_at=to_ms(d["updated_at"], "updated_at"), last_error=d["last_error"], team=d["team"])


def in_scope(scope: Scope) -> ColumnElement[bool] | None:
    """The rows ``scope`` sees (None: every row, a global caller's)."""
    return None if scope.teams is None else reach_queue.c.team.in_(sorted(scope.teams))


def _scoped(conditions: builtins.list[Any], scope: Scope) -> builtins.list[Any]:
    condition = in_scope(scope)
    return conditions if condition is None else [*conditions, condition]


class QueuePages:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _touch(self, conn: Connection) -> Any:
        return greatest(conn, db_now_ms(), reach_queue.c.updated_at + 1)

    # --- operator API -----------------------------------------------------------------------------

    def get(self, queue_id: str, scope: Scope = EVERY_TEAM) -> QueueEntry | None:
        query = select(reach_queue).where(*_scoped([reach_queue.c.queue_id == queue_id], scope))
        row = read(self.engine, lambda conn: conn.execute(query).first())
        return entry_from_row(row) if row is not None else None

    def count_by_status(self, scope: Scope = EVERY_TEAM) -> dict[str, int]:
        """Messages per status (in ``scope``), every one counted."""
        query = select(reach_queue.c.status, func.count()).where(*_scoped([], scope)).group_by(reach_queue.c.status)
        return read(self.engine, lambda conn: {row[0]: int(row[1]) for row in conn.execute(query)})

    def list(self, status: QueueStatus, limit: int, offset: int, scope: Scope = EVERY_TEAM) -> list[QueueEntry]:
        query = (select(reach_queue).where(*_scoped([reach_queue.c.status == status], scope))
                 .order_by(reach_queue.c.updated_at, reach_queue.c.queue_id).limit(limit).offset(offset))
        return read(self.engine, lambda conn: [entry_from_row(r) for r in conn.execute(query)])

    def requeue_dead(self, queue_id: str, expected_updated_at: int, scope: Scope = EVERY_TEAM) -> bool:
        """dead -> pending at the current version only (and in ``scope``); attempts reset, id and
        policy kept."""
        conditions = _scoped([reach_queue.c.queue_id == queue_id, reach_queue.c.status == QueueStatus.DEAD,
                              reach_queue.c.updated_at == expected_updated_at], scope)

        def work(conn: Connection) -> bool:
            return one_row(conn.execute(update(reach_queue).where(*conditions).values(
                status=QueueStatus.PENDING, attempt_count=0, next_attempt_at=db_now_ms(), last_failure=None,
                last_error=None, updated_at=self._touch(conn))))

        return write(self.engine, work)

    def resolve_unknown(self, queue_id: str, status: DeliveryResolution, message_id: str | None,
                        resolved_by: str | None, expected_updated_at: int | None = None,
                        scope: Scope = EVERY_TEAM) -> bool:
        """unknown -> sent | discarded (an operator's verdict); exactly one concurrent call wins.
        With ``expected_updated_at`` it applies only at that version (the page the verdict was made on)."""
        conditions = _scoped([reach_queue.c.queue_id == queue_id, reach_queue.c.status == QueueStatus.UNKNOWN], scope)
        if expected_updated_at is not None:
            conditions.append(reach_queue.c.updated_at == expected_updated_at)

        def work(conn: Connection) -> bool:
            resolved = one_row(conn.execute(update(reach_queue).where(*conditions).values(
                status=status, message_id=message_id, resolved_by=resolved_by,
                updated_at=self._touch(conn))))
            if resolved:  # the row is ours until the commit: its provider, for the counter
                provider = conn.execute(select(reach_queue.c.provider).where(reach_queue.c.queue_id == queue_id))
                Tally().delivery(str(provider.scalar_one()), status).write(conn)
            return resolved

        return write(self.engine, work)

    # --- dashboard: filtered lists, keyset pages, bulk requeue ---------------------------------

    def count_by_status_capped(self, statuses: tuple[QueueStatus, ...], cap: int,
                               scope: Scope = EVERY_TEAM) -> dict[str, int]:
        """Messages per status (in ``scope``), each counted up to ``cap + 1`` rows: a bounded index
        range scan on (status, ...) per status, or (team, status, ...) per team of the scope,
        however many sent rows have piled up."""

        def work(conn: Connection) -> dict[str, int]:
            found: dict[str, int] = {}
            for status in statuses:
                capped = (select(reach_queue.c.queue_id).where(*_scoped([reach_queue.c.status == status], scope))
                          .limit(cap + 1))
                found[status] = int(conn.execute(select(func.count()).select_from(capped.subquery())).scalar_one())
            return found

        return read(self.engine, work)

    def browse(self, where: QueueFilter, limit: int, after: tuple[int, str] | None) -> builtins.list[QueueEntry]:
        """One page of ``where``, newest change first: ORDER BY (updated_at, queue_id) DESC, the
        rows strictly after the key ``after`` of the previous page's last row (keyset pagination,
        served by the index on (status, updated_at))."""
        conditions = [where.condition()]
        if after is not None:
            key_at, key_id = after
            # "<= and (< or <)": the first comparison bounds the index scan, the rest is a filter.
            conditions.append(and_(reach_queue.c.updated_at <= key_at, or_(
                reach_queue.c.updated_at < key_at, reach_queue.c.queue_id < key_id)))
        query = (select(reach_queue).where(*conditions)
                 .order_by(reach_queue.c.updated_at.desc(), reach_queue.c.queue_id.desc()).limit(limit))
        return read(self.engine, lambda conn: [entry_from_row(r) for r in conn.execute(query)])

    def capture_dead(self, where: QueueFilter, cutoff: int, at_most: int) -> DeadSet:
        """The bulk-requeue set of ``where`` (status dead): its oldest ``at_most`` rows changed at or
        before ``cutoff``, as a bound on (updated_at, queue_id), the count inside it, and whether
        more rows matched than it takes. Read-only; reads at most ``at_most + 1`` index entries."""
        return read(self.engine, lambda conn: _KEY.capture(conn, where.condition(), cutoff, at_most, DeadSet))

    def dead_versions(self, where: QueueFilter, bound: DeadSet, after: tuple[int, str] | None,
                      limit: int) -> builtins.list[tuple[str, int]]:
        """(queue_id, updated_at) of the rows still inside ``bound``, oldest first, after ``after``."""
        conditions = [where.condition(), bound.condition()]
        if after is not None:
            conditions.append(_KEY.after(after))
        query = (select(reach_queue.c.queue_id, reach_queue.c.updated_at).where(*conditions)
                 .order_by(reach_queue.c.updated_at, reach_queue.c.queue_id).limit(limit))
        return read(self.engine, lambda conn: [(str(r[0]), to_ms(r[1], "updated_at")) for r in conn.execute(query)])

    def requeue_dead_versions(self, versions: builtins.list[tuple[str, int]]) -> int:
        """dead -> pending for each (queue_id, updated_at) still at exactly that version, in one
        transaction (a compare-and-set per row); returns how many applied. Columns as
        :meth:`requeue_dead`."""
        if not versions:
            return 0
        matches = or_(*(and_(reach_queue.c.queue_id == queue_id, reach_queue.c.updated_at == version)
                        for queue_id, version in versions))

        def work(conn: Connection) -> int:
            return int(conn.execute(update(reach_queue).where(reach_queue.c.status == QueueStatus.DEAD, matches).values(
                status=QueueStatus.PENDING, attempt_count=0, next_attempt_at=db_now_ms(), last_failure=None,
                last_error=None, updated_at=self._touch(conn))).rowcount)

        return write(self.engine, work)

@dataclass(frozen=True)
class QueueFilter:
    """Which rows a dashboard list shows: a status and optional exact matches."""

    status: QueueStatus
    provider: str | None = None
    failure: str | None = None  # last_failure: the failure class
    template: str | None = None
    scope: Scope = EVERY_TEAM  # the caller's teams

    def condition(self) -> ColumnElement[bool]:
        parts = _scoped([reach_queue.c.status == self.status], self.scope)
        if self.provider is not None:
            parts.append(reach_queue.c.provider == self.provider)
        if self.failure is not None:
            parts.append(reach_queue.c.last_failure == self.failure)
        if self.template is not None:
            parts.append(reach_queue.c.template == self.template)
        return and_(*parts)


@dataclass(frozen=True)
class DeadSet(Captured):
    """A captured bulk-requeue set of dead letters, by (updated_at, queue_id)
    (store/captured_sets.py)."""

    def condition(self) -> ColumnElement[bool]:
        return _KEY.up_to(self.bound_at, self.bound_id)
