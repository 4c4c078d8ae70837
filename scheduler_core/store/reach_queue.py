"""The notification delivery queue (``reach_queue``); stored templates are in ``reach_templates``.

Leases work as for executions: a claimed row carries a random ``lock_token`` and a
``locked_until`` deadline computed and compared with ``db_now_ms()`` inside each statement;
an owner's write locks the row first so the comparison runs after any lock wait
(``store/owner_write.py``). Every conditional write reports whether it applied (0 rows: the
caller lost).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import BigInteger, and_, case, literal, null, select, update
from sqlalchemy.engine import Connection, Engine, Row

from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, to_ms
from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.tables import reach_queue
from scheduler_core.errors import DatabaseError
from scheduler_core.statuses import QueueStatus
from scheduler_core.store.dialect import greatest
from scheduler_core.store.owner_write import Owned, owner_write
from scheduler_core.store.reach_queue_pages import QueueEntry, QueuePages, entry_from_row
from scheduler_core.store.teams import check_team_exists
from scheduler_core.store.totals import Tally
from scheduler_core.store.transactions import one_row, read, write

OWNED_STATUSES = (QueueStatus.PROCESSING, QueueStatus.SENDING)
_OWNED = Owned(reach_queue.c.queue_id, reach_queue.c.updated_at, (reach_queue.c.provider,))


@dataclass(frozen=True)
class QueuedMessage:
    """A claimed row, with what the provider needs to deliver it."""

    entry: QueueEntry
    lock_token: str | None
    recipient: str
    subject: str | None
    body: str
    extra: dict[str, Any]


@dataclass(frozen=True)
class Settlement:
    """An owner's final word on one claimed row (see ``QueueRepository.settle_many``)."""

    queue_id: str
    status: QueueStatus  # sent | dead | unknown | pending
    message_id: str | None = None  # the provider's id of a sent message (None: unchanged)
    last_failure: str | None = None  # the failure class (None: cleared)
    retry_in_ms: int | None = None  # pending: next attempt this long after now (DB clock)
    last_error: str | None = None  # what went wrong: "<class>: <short masked message>" (None: cleared)


def _claimed(row: Row[Any], token: str, locked_until: int, at: int) -> QueuedMessage:
    """A row read by a claim, as the claim's UPDATE left it (same values, computed alike)."""
    message = _message(row)
    entry = replace(message.entry, status=QueueStatus.PROCESSING, attempt_count=message.entry.attempt_count + 1,
                    locked_until=locked_until, updated_at=max(at, message.entry.updated_at + 1))
    return replace(message, entry=entry, lock_token=token)


def _message(row: Row[Any]) -> QueuedMessage:
    d = row._mapping
    return QueuedMessage(entry_from_row(row), d["lock_token"], d["recipient"], d["subject"], d["body"],
                         dict(d["extra"] or {}))


class QueueRepository(QueuePages):
    """The queue's writers (enqueue, claim, owners' writes, recovery); the operator's reads and
    verdicts are inherited from ``QueuePages`` (reach_queue_pages.py)."""

    def __init__(self, engine: Engine, node_id: str, lease_ms: int) -> None:
        super().__init__(engine)
        self.node_id = node_id
        self.lease_ms = lease_ms

    def now(self) -> int:
        return to_ms(read(self.engine, lambda conn: conn.execute(select(db_now_ms())).scalar_one()), "db_now_ms")

    def enqueue(self, queue_id: str, provider: str, template: str | None, recipient: str, subject: str | None,
                body: str, extra: dict[str, Any], policy: tuple[int, int, int], not_before: int | None,
                team: str | None = None) -> None:
        """Insert a ``pending`` row; committed when this returns. ``policy`` =
        (max_attempts, retry_delay_ms, max_retry_delay_ms), stored with the message. ``team``: the
        team it is about (it must exist: ``ConfigError`` naming ``team``); None, every team's."""
        max_attempts, delay, max_delay = policy

        def work(conn: Connection) -> None:
            if team is not None:
                check_team_exists(conn, team)
            now = db_statement_now_ms()  # one reading: created_at = updated_at
            conn.execute(reach_queue.insert().values(
                queue_id=queue_id, provider=provider, template=template, recipient=recipient, subject=subject,
                body=body, extra=extra, status=QueueStatus.PENDING, attempt_count=0, max_attempts=max_attempts,
                retry_delay_ms=delay, max_retry_delay_ms=max_delay, team=team,
                next_attempt_at=now if not_before is None else not_before, created_at=now, updated_at=now))

        write(self.engine, work)

    # --- a round's claims and the owner's writes, a wave of rows at a time ----------------------

    def claim_due(self, eligible_at: int, token: str, limit: int, urgent_only: bool = False,
                  conn: Connection | None = None) -> list[QueuedMessage]:
        """Claim up to ``limit`` ``pending`` rows due at ``eligible_at`` (fixed per round), the
        oldest first, in one transaction of two statements: status ``processing``, ``token`` (one
        token for the whole wave), ``locked_by``, a lease, ``attempt_count + 1`` (counted at claim,
        so a crash after it still uses up the attempt). An empty list: nothing is due.

        The first statement reads the rows with ``FOR UPDATE SKIP LOCKED`` and the DB clock:
        concurrent claimers lock disjoint rows and never wait on each other, so a round ends only
        when nothing is due, never because it lost a race (SQLite: BEGIN IMMEDIATE serialises
        claimers). The lease ``locked_until = that reading + lease`` and the new ``updated_at``
        (``max(reading, updated_at + 1)``) are computed in the UPDATE from the same reading, so
        the returned messages carry exactly what was written. ``conn``: a connection the caller
        keeps between transactions (a round's), else one from the pool."""
        def work(conn: Connection) -> list[QueuedMessage]:
            now = db_now_ms().label("claim_now")
            due = (select(reach_queue, now)
                   .where(reach_queue.c.status == QueueStatus.PENDING, reach_queue.c.next_attempt_at <= eligible_at)
                   .order_by(reach_queue.c.next_attempt_at, reach_queue.c.queue_id).limit(limit))
            if urgent_only:
                due = due.where(reach_queue.c.urgent.is_(True))
            if dialect_kind(conn) != "sqlite":
                due = due.with_for_update(skip_locked=True)
            rows = conn.execute(due).all()
            if not rows:
                return []
            at = to_ms(rows[0]._mapping["claim_now"], "db_now_ms")
            ids = [row._mapping["queue_id"] for row in rows]
            claimed = conn.execute(update(reach_queue).where(
                reach_queue.c.queue_id.in_(ids), reach_queue.c.status == QueueStatus.PENDING,
            ).values(status=QueueStatus.PROCESSING, lock_token=token, locked_by=self.node_id,
                     locked_until=at + self.lease_ms, attempt_count=reach_queue.c.attempt_count + 1,
                     updated_at=greatest(conn, literal(at, BigInteger()), reach_queue.c.updated_at + 1))).rowcount
            if claimed != len(ids):  # the rows are locked (servers) or the writer is alone (SQLite)
                raise DatabaseError(f"claim changed {claimed} of {len(ids)} locked rows; rolled back")
            return [_claimed(row, token, at + self.lease_ms, at) for row in rows]

        return write(conn or self.engine, work)

    def any_due(self, eligible_at: int, urgent_only: bool = False) -> bool:
        """Whether a ``pending`` row is due at ``eligible_at`` (a plain read: it sees rows that
        another claimer holds locked, uncommitted, and that ``claim_due`` skipped)."""
        due = select(reach_queue.c.queue_id).where(reach_queue.c.status == QueueStatus.PENDING,
                                                   reach_queue.c.next_attempt_at <= eligible_at).limit(1)
        if urgent_only:
            due = due.where(reach_queue.c.urgent.is_(True))
        return read(self.engine, lambda conn: conn.execute(due).first() is not None)

    def claim_next(self, eligible_at: int, token: str, urgent_only: bool = False) -> QueuedMessage | None:
        """``claim_due`` of one row: the claimed message, or None when nothing is due."""
        claimed = self.claim_due(eligible_at, token, 1, urgent_only)
        return claimed[0] if claimed else None

    def _owned_by(self, ids: builtins.list[str], token: str, statuses: tuple[QueueStatus, ...]) -> Any:
        """Still ours: one of ``ids``, our token, in ``statuses``, lease unexpired (DB clock, now)."""
        return and_(reach_queue.c.queue_id.in_(ids), reach_queue.c.lock_token == token,
                    reach_queue.c.status.in_(statuses), reach_queue.c.locked_until > db_now_ms())

    def _owner_write(self, ids: builtins.list[str], token: str, statuses: tuple[QueueStatus, ...],
                     values: Callable[[Connection], dict[str, Any]], bind: Connection | None = None,
                     tally: Callable[[dict[str, str]], Tally] | None = None) -> set[str]:
        """An owner's lease-checked UPDATE of ``ids`` in one transaction (``store/owner_write.py``:
        the rows locked first, in queue-id order, then the changed ids from RETURNING or MySQL's
        row count); the ids it changed. ``tally``: what the changed rows (id -> provider) count,
        written in the same transaction (store/totals.py)."""
        if not ids:
            return set()
        ordered = sorted(set(ids))

        def work(conn: Connection) -> set[str]:
            changed = owner_write(conn, _OWNED, ordered, lambda: update(reach_queue).where(
                self._owned_by(ordered, token, statuses)).values(**values(conn)))
            if tally is not None:
                tally({queue_id: str(provider) for queue_id, (provider,) in changed.items()}).write(conn)
            return set(changed)

        return write(bind or self.engine, work)

    def mark_sending_many(self, ids: builtins.list[str], token: str, conn: Connection | None = None) -> set[str]:
        """processing -> sending for a wave, written right before its provider calls (lease
        extended); the ids still ours (the others must not be sent)."""
        return self._owner_write(ids, token, (QueueStatus.PROCESSING,), lambda c: {
            "status": QueueStatus.SENDING, "locked_until": db_now_ms() + self.lease_ms, "updated_at": self._touch(c)},
            conn)

    def mark_sending(self, queue_id: str, token: str) -> bool:
        return queue_id in self.mark_sending_many([queue_id], token)

    def renew_claim(self, token: str) -> int:
        """Extend the lease of every row still ours under ``token``; how many were extended."""
        return int(write(self.engine, lambda conn: conn.execute(update(reach_queue).where(
            reach_queue.c.lock_token == token, reach_queue.c.status.in_(OWNED_STATUSES),
            reach_queue.c.locked_until > db_now_ms()).values(locked_until=db_now_ms() + self.lease_ms)).rowcount))

    def renew(self, queue_id: str, token: str) -> bool:
        def work(conn: Connection) -> bool:
            return one_row(conn.execute(update(reach_queue).where(self._owned_by([queue_id], token, OWNED_STATUSES))
                                .values(locked_until=db_now_ms() + self.lease_ms)))

        return write(self.engine, work)

    def settle_many(self, token: str, settlements: builtins.list[Settlement],
                    conn: Connection | None = None) -> set[str]:
        """The owner's final word on the rows of a wave, in one transaction: each row's status
        (sent / dead / unknown, or back to pending with ``next_attempt_at = now + retry_in_ms``),
        ``last_failure`` and ``last_error``, ``message_id`` when given; lease and token cleared. Applies to each row
        only while its lease holds; returns the ids it applied to."""
        by_id = {s.queue_id: s for s in settlements}
        key = reach_queue.c.queue_id

        def per_row(name: str, kept: Any, sql: Callable[[Any], Any] = lambda v: v) -> Any:
            """Each row's value of ``name`` (``kept``: the column unchanged where none is given);
            one value, not a CASE, when every row gets the same."""
            given = {i: getattr(s, name) for i, s in by_id.items() if getattr(s, name) is not None}
            if not given:
                return kept
            if len(given) == len(by_id) and len(set(given.values())) == 1:
                return sql(next(iter(given.values())))
            return case({i: sql(v) for i, v in given.items()}, value=key, else_=kept)

        def tally(changed: dict[str, str]) -> Tally:
            ended = Tally()
            for queue_id, provider in sorted(changed.items()):
                ended.delivery(provider, by_id[queue_id].status)
            return ended

        return self._owner_write(list(by_id), token, OWNED_STATUSES, lambda c: {
            "status": per_row("status", reach_queue.c.status), "lock_token": None, "locked_until": None,
            "last_failure": per_row("last_failure", null()),  # None clears it
            "last_error": per_row("last_error", null()),  # None clears it
            "message_id": per_row("message_id", reach_queue.c.message_id),
            "next_attempt_at": per_row("retry_in_ms", reach_queue.c.next_attempt_at, lambda v: db_now_ms() + v),
            "updated_at": self._touch(c)}, conn, tally)

    def settled_as(self, settlements: builtins.list[Settlement]) -> set[str]:
        """The ids whose row already reads as its settlement says (status, last error, and the
        provider's message id when given): a settle whose answer was lost, read back. Recovery
        never writes such a row: it writes its own last error (``LEASE_LOST``), never ``sent``."""
        by_id = {s.queue_id: s for s in settlements}
        q, ids = reach_queue.c, list(by_id)
        query = select(q.queue_id, q.status, q.last_error, q.message_id, q.lock_token).where(q.queue_id.in_(ids))
        rows = read(self.engine, lambda conn: conn.execute(query).all())
        return {row.queue_id for row in rows if row.lock_token is None and row.status == by_id[row.queue_id].status
                and row.last_error == by_id[row.queue_id].last_error
                and by_id[row.queue_id].message_id in (None, row.message_id)}

    def settle(self, queue_id: str, token: str, status: QueueStatus, *, message_id: str | None = None,
               last_failure: str | None = None, retry_in_ms: int | None = None, last_error: str | None = None) -> bool:
        """``settle_many`` of one row."""
        return queue_id in self.settle_many(token, [Settlement(queue_id, QueueStatus(status), message_id, last_failure,
                                                                retry_in_ms, last_error)])

    # --- crash recovery -------------------------------------------------------------------------

    def expired(self, limit: int = 100) -> list[QueuedMessage]:
        """Claimed rows whose lease ran out (their owner died or stalled)."""
        query = (select(reach_queue).where(reach_queue.c.status.in_(OWNED_STATUSES),
                                           reach_queue.c.locked_until < db_now_ms())
                 .order_by(reach_queue.c.locked_until).limit(limit))
        return read(self.engine, lambda conn: [_message(r) for r in conn.execute(query)])

    def recover(self, message: QueuedMessage, status: QueueStatus, last_failure: str | None,
                retry_in_ms: int | None = None, last_error: str | None = None) -> bool:
        """Settle an expired claim (same token, still expired) without its owner."""

        def work(conn: Connection) -> bool:
            values: dict[str, Any] = {"status": status, "lock_token": None, "locked_until": None,
                                      "last_failure": last_failure, "last_error": last_error,
                                      "updated_at": self._touch(conn)}
            if retry_in_ms is not None:
                values["next_attempt_at"] = db_now_ms() + retry_in_ms
            recovered = one_row(conn.execute(update(reach_queue).where(
                reach_queue.c.queue_id == message.entry.queue_id, reach_queue.c.lock_token == message.lock_token,
                reach_queue.c.status == message.entry.status, reach_queue.c.locked_until < db_now_ms(),
            ).values(**values)))
            if recovered:
                Tally().delivery(message.entry.provider, status).write(conn)
            return recovered

        return write(self.engine, work)
