"""MariaDB Galera Cluster: found on every connection, made causal, checked at start-up.

Every Galera node is a primary. A row lock holds on its own node only; a conflicting write made
through another node is found at COMMIT by certification and aborted with 1213, which the
transaction helpers already rerun as a deadlock (store/transactions.py). What certification does
not give is a read that has seen every commit of the cluster: a session on a node that has not
yet applied another node's commit reads the older row. So each session on a Galera node asks for
causal reads and causal UPDATE/DELETE (``wsrep_sync_wait`` |= 3), keeping any stronger setting
the server has.

At start-up :func:`check_galera` refuses a node that cannot keep the rules (a named
:class:`GaleraSettingError`): replication other than ROW, or schema changes not replicated in
total order (``wsrep_OSU_method`` RSU). The clocks of the Galera nodes are compared through the
scheduler nodes' heartbeats (:func:`clock_ahead`); docs/semantics.md, "Galera", says why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from scheduler_core.errors import GaleraSettingError

# wsrep_sync_wait bits: 1 reads (SELECT, SHOW, BEGIN), 2 UPDATE and DELETE, 4 INSERT and REPLACE.
# Inserts need no wait: a key committed elsewhere conflicts at certification (or as a duplicate).
SYNC_WAIT_BITS = 3


def on_connect(cursor: Any) -> bool:
    """On a new MySQL/MariaDB session: when the server is a Galera node, make the session's
    reads and updates causal. Returns whether it is one."""
    cursor.execute("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")  # no error on servers without wsrep
    row = cursor.fetchone()
    if row is None or str(row[1]).upper() != "ON":
        return False
    cursor.execute(f"SET SESSION wsrep_sync_wait = @@session.wsrep_sync_wait | {SYNC_WAIT_BITS}")
    return True


@dataclass(frozen=True)
class GaleraNode:
    """What one Galera node reports about itself and its cluster."""

    node_name: str
    cluster_status: str  # Primary | non-Primary | Disconnected
    cluster_size: int
    local_state: str  # Synced, Donor/Desynced, Joining, ...
    ready: bool  # wsrep_ready: the node accepts queries
    sync_wait: int  # this session's wsrep_sync_wait
    binlog_format: str
    osu_method: str  # TOI: schema changes in total order on every node; RSU: this node only

    @property
    def problem(self) -> str | None:
        """Why the scheduler refuses to run through this node (None: it may)."""
        if self.binlog_format.upper() != "ROW":
            return (f"binlog_format is {self.binlog_format}: Galera replicates rows; set binlog_format=ROW on "
                    "every node")
        if self.osu_method.upper() != "TOI":
            return (f"wsrep_OSU_method is {self.osu_method}: the scheduler's migrations must reach every node in "
                    "the same order; set wsrep_OSU_method=TOI (the default)")
        if self.sync_wait & SYNC_WAIT_BITS != SYNC_WAIT_BITS:
            return (f"wsrep_sync_wait is {self.sync_wait} on this session: decisions would read rows another node "
                    f"has changed; it must include {SYNC_WAIT_BITS} (the scheduler sets it on each connection)")
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def galera_node(bind: Engine | Connection) -> GaleraNode | None:
    """The Galera node behind ``bind`` (None: not a Galera node, or not MySQL/MariaDB)."""
    if bind.dialect.name not in ("mysql", "mariadb"):
        return None
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            found = galera_node(conn)
            conn.rollback()
        return found
    variables = _pairs(bind.execute(text(
        "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_node_name', 'wsrep_sync_wait', "
        "'binlog_format', 'wsrep_OSU_method')")))
    if variables.get("wsrep_on", "OFF").upper() != "ON":
        return None
    status = _pairs(bind.execute(text(
        "SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_status', 'wsrep_cluster_size', "
        "'wsrep_local_state_comment', 'wsrep_ready')")))
    return GaleraNode(
        node_name=variables.get("wsrep_node_name", ""), cluster_status=status.get("wsrep_cluster_status", ""),
        cluster_size=int(status.get("wsrep_cluster_size") or 0),
        local_state=status.get("wsrep_local_state_comment", ""),
        ready=status.get("wsrep_ready", "OFF").upper() == "ON", sync_wait=int(variables.get("wsrep_sync_wait") or 0),
        binlog_format=variables.get("binlog_format", ""), osu_method=variables.get("wsrep_osu_method", ""))


def check_galera(engine: Engine) -> GaleraNode | None:
    """The Galera node behind ``engine``, or None; raises :class:`GaleraSettingError` (naming
    the setting) when the scheduler cannot keep its rules through it."""
    node = galera_node(engine)
    if node is not None and node.problem is not None:
        raise GaleraSettingError(f"Galera node {node.node_name or '?'}: {node.problem}")
    return node


def clock_ahead(now_ms: int, heartbeats: Iterable[tuple[str, int]]) -> tuple[str, int] | None:
    """The node whose last heartbeat is furthest in this database clock's future, and by how much
    (None: none is). A heartbeat carries its writer's database clock; replication only makes it
    look older, so one from the future is the writer's Galera node's clock ahead of this one's by
    at least that much."""
    ahead = [(node_id, seen - now_ms) for node_id, seen in heartbeats if seen > now_ms]
    return max(ahead, key=lambda pair: pair[1]) if ahead else None


def _pairs(rows: Iterable[Any]) -> dict[str, str]:
    return {str(name).lower(): "" if value is None else str(value) for name, value in rows}


# --- a lock the whole cluster sees -------------------------------------------------------

LOCK_TABLE = "hai_cluster_lock"
LOCK_LEASE_S = 60  # renewed every LOCK_LEASE_S / 4 while held; a dead holder's lock expires
_LOCK_POLL_S = 0.5


@contextmanager
def cluster_lock(engine: Engine, name: str, holder: str, wait_s: float) -> Iterator[None]:
    """Hold ``name`` across every Galera node (``GET_LOCK`` holds on one node only).

    The lock is a row: inserting it is certified against the whole cluster, so two nodes cannot
    both commit it; it carries an expiry on the database clock, renewed while held, so a holder
    that dies without deleting it is replaced after ``LOCK_LEASE_S``. Raises
    :class:`LockTimeoutError` after ``wait_s``.
    """
    with engine.connect() as conn:
        conn.execute(text(f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (name VARCHAR(64) NOT NULL PRIMARY KEY, "
                          "holder VARCHAR(160) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB"))
        conn.commit()
        deadline = time.monotonic() + wait_s
        while not _take(conn, name, holder):
            if time.monotonic() > deadline:
                raise LockTimeoutError(f"the cluster lock {name!r} stayed held for {wait_s:.0f} s")
            time.sleep(_LOCK_POLL_S)
    stop = threading.Event()
    keeper = threading.Thread(target=_keep, args=(engine, name, holder, stop), name=f"hai-lock-{name}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        with engine.connect() as conn:
            conn.execute(text(f"DELETE FROM {LOCK_TABLE} WHERE name = :name AND holder = :holder"),
                         {"name": name, "holder": holder})
            conn.commit()


class LockTimeoutError(RuntimeError):
    """The cluster lock was not free within the wait."""


def _take(conn: Connection, name: str, holder: str) -> bool:
    """One try: insert the lock row, or take over an expired one. A lost race (a duplicate key,
    or 1213 from certification at COMMIT) is "held by another"."""
    lease = f"NOW(6) + INTERVAL {LOCK_LEASE_S} SECOND"
    try:
        conn.execute(text(
            f"INSERT INTO {LOCK_TABLE} (name, holder, expires_at) VALUES (:name, :holder, {lease}) "
            f"ON DUPLICATE KEY UPDATE holder = IF(expires_at < NOW(6), VALUES(holder), holder), "
            f"expires_at = IF(holder = VALUES(holder), {lease}, expires_at)"),
            {"name": name, "holder": holder})
        mine = conn.execute(text(f"SELECT holder FROM {LOCK_TABLE} WHERE name = :name"), {"name": name}).scalar()
        conn.commit()
    except DBAPIError as exc:
        conn.rollback()
        if _lost_race(exc):
            return False
        raise
    return mine == holder


def _keep(engine: Engine, name: str, holder: str, stop: threading.Event) -> None:
    while not stop.wait(LOCK_LEASE_S / 4):
        try:
            with engine.connect() as conn:
                conn.execute(text(f"UPDATE {LOCK_TABLE} SET expires_at = NOW(6) + INTERVAL {LOCK_LEASE_S} SECOND "
                                  "WHERE name = :name AND holder = :holder"), {"name": name, "holder": holder})
                conn.commit()
        except DBAPIError:  # the next renewal tries again; the lease outlasts three misses
            continue


def _lost_race(exc: DBAPIError) -> bool:
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] in (1062, 1213)
