"""The lease-checked owner write, once, for every table whose rows an owner holds under a lease.

An owner's write locks its rows first and then runs one UPDATE whose WHERE checks the lease
against the DB clock; it answers which rows it changed. Why the lock comes first:
docs/semantics.md T3; how each database answers: docs/architecture.md (5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Update
from sqlalchemy.sql.schema import Column

from scheduler_core.db.engine import dialect_kind
from scheduler_core.store.dialect import Batch, StatementCache, run


@dataclass(frozen=True)
class Owned:
    """A table whose rows an owner holds under a lease: its key, the version column that every
    owner write advances (``updated_at``), and the columns to answer with for each changed row."""

    key: Column[Any]
    version: Column[Any]
    carried: tuple[Column[Any], ...] = ()


def lock_owned(conn: Connection, owned: Owned, ids: Sequence[str],
               cache: StatementCache | None = None) -> dict[str, tuple[Any, ...]]:
    """Take the row locks of ``ids`` before an owner's lease-checked write, in key order
    (concurrent lockers queue alike); each locked row's ``(version, *carried)``.

    PostgreSQL evaluates an UPDATE's WHERE while scanning, before it waits on a row lock, and
    re-evaluates it after the wait only if the blocking transaction changed the row: a deadline
    that passed during the wait would go unnoticed. Locking first makes the UPDATE read the clock
    after every wait. While we hold the locks only our own write can change a row's version,
    which is how MySQL learns per row what its UPDATE changed. SQLite needs no row lock (BEGIN
    IMMEDIATE already serialises writers): nothing is read there. ``cache``: the PostgreSQL
    statement is built once (``StatementCache``).
    """
    if dialect_kind(conn) == "sqlite":
        return {}
    batch = Batch(conn).listed("ids", list(ids))

    def build() -> Any:
        return (select(owned.key, owned.version, *owned.carried).where(batch.one_of(owned.key, "ids"))
                .order_by(owned.key).with_for_update())

    query = cache.driver("owner_lock", build) if cache is not None and batch.cacheable else build()
    return {row[0]: tuple(row[1:]) for row in run(conn, query, batch.params).all()}


def owner_write(conn: Connection, owned: Owned, ids: Sequence[str], statement: Callable[[], Update],
                params: Mapping[str, Any] | None = None, cache: StatementCache | None = None,
                name: str = "") -> dict[str, tuple[Any, ...]]:
    """Lock ``ids`` (``lock_owned``), then run the owner's lease-checked UPDATE ``statement()``
    (its WHERE names the rows and checks the lease); the rows it changed, each id with its
    ``carried`` values. ``ids`` in key order.

    The answer is the UPDATE's RETURNING, except on MySQL, which has none: there the matched-row
    count, and only when it falls short a re-read of the locked rows' versions against what the
    lock read. ``cache`` and ``name``: on PostgreSQL the UPDATE is built once, and must then not
    depend on the batch (``dialect.Batch``).
    """
    params = params or {}
    before = lock_owned(conn, owned, ids, cache)
    kind = dialect_kind(conn)
    if kind != "mysql":
        def returning() -> Any:
            return statement().returning(owned.key, *owned.carried)

        update = cache.driver(name, returning) if cache is not None and kind == "postgresql" else returning()
        return {row[0]: tuple(row[1:]) for row in run(conn, update, params).all()}
    matched = conn.execute(statement(), params).rowcount  # MySQL: rows matched by the WHERE
    if matched == 0:
        return {}
    if matched == len(ids):
        return {i: before[i][1:] for i in ids if i in before}
    after = {row[0]: row[1] for row in conn.execute(
        select(owned.key, owned.version).where(owned.key.in_(list(ids))))}
    return {i: before[i][1:] for i in ids if i in after and i in before and after[i] != before[i][0]}
