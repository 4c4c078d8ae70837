"""How the store talks to the database: transactions, retries and held connections.

- ``write``: one write transaction, run again after lock contention -- deadlocks and lock
  wait timeouts (``is_retryable``). Nothing else is retried: a failed COMMIT may have
  committed. On a Galera node the budget is larger and the waits grow (``retry_wait``).
- ``read``: one read-only transaction (SQLite: no write lock taken).
- ``HeldConnection``: a connection kept checked out between uses (a flusher's, writing batch
  after batch); ``AutocommitLine``: single-statement reads in autocommit mode on one (the tick's).

Database failures surface as :class:`DatabaseError` (``hai:reldb:002``) naming the action,
with the driver error as the cause.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.outage import is_unreachable as is_unreachable  # the store's callers ask it here too
from scheduler_core.errors import DatabaseError

logger = logging.getLogger("scheduler_core.store")
T = TypeVar("T")
_MYSQL_RETRYABLE = {1213, 1205}  # deadlock, lock wait timeout
_PG_RETRYABLE = {"40P01", "40001"}  # deadlock detected, serialization failure
WRITE_ATTEMPTS = 4
# A Galera node learns of a conflicting write made through another node only at COMMIT
# (certification, 1213): two writers that keep touching the same rows -- two senders claiming the
# oldest due messages, two nodes adding to one counter -- can lose several times in a row, each
# loss costing the whole transaction. More attempts, and waits that double (up to half a second)
# with full jitter so that the two stop meeting: about 2.5 s at most before the error is raised.
GALERA_WRITE_ATTEMPTS = 10
_GALERA_WAIT_CAP_S = 0.5
# Event.wait rather than time.sleep: the same relative wait, and it also behaves under
# libfaketime, which the clock-skew tests use (time.sleep's absolute-deadline nanosleep does not).
_pause = threading.Event().wait


def is_retryable(exc: BaseException) -> bool:
    """The transaction was rolled back because of lock contention: running it again is safe."""
    if not isinstance(exc, DBAPIError) or exc.connection_invalidated:
        return False
    orig = exc.orig
    code = getattr(orig, "sqlstate", None)
    if code in _PG_RETRYABLE:
        return True
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_RETRYABLE:
        return True
    return "database is locked" in str(orig)


def write(bind: Engine | Connection, work: Callable[[Connection], T], attempts: int | None = None) -> T:
    """Run ``work`` in one write transaction; rerun it after a deadlock or lock timeout (or a
    Galera certification failure): ``attempts`` in all, by default ``WRITE_ATTEMPTS``, or
    ``GALERA_WRITE_ATTEMPTS`` on a Galera node.

    ``bind`` is the engine (a pooled connection per transaction) or a connection its caller
    keeps between transactions (a flusher's ``HeldConnection``). Database failures surface as
    :class:`DatabaseError` (``hai:reldb:002``) with the driver error as its cause; errors
    raised by ``work`` itself pass through unchanged.
    """
    attempt = 0
    while True:
        attempt += 1
        galera = False
        try:
            if isinstance(bind, Connection):
                galera = on_galera(bind)
                with bind.begin():
                    return work(bind)
            with bind.begin() as conn:
                galera = on_galera(conn)
                return work(conn)
        except DBAPIError as exc:
            budget = attempts if attempts is not None else GALERA_WRITE_ATTEMPTS if galera else WRITE_ATTEMPTS
            if attempt >= budget or not is_retryable(exc):
                raise _database_error("write", exc) from exc
            _pause(retry_wait(attempt, galera))
        except SQLAlchemyError as exc:
            raise _database_error("write", exc) from exc


def on_galera(conn: Connection) -> bool:
    """Whether ``conn`` is a session on a Galera node (found when it connected, db/galera.py)."""
    return bool(conn.info.get("galera"))


def retry_wait(attempt: int, galera: bool) -> float:
    """Seconds to wait before running a write again after its ``attempt``-th loss: on one server
    5-50 ms times the attempt; on Galera a full-jitter wait under 10 ms doubled per attempt,
    at most ``_GALERA_WAIT_CAP_S``."""
    if galera:
        return random.uniform(0.0, min(_GALERA_WAIT_CAP_S, 0.01 * 2 ** attempt))
    return random.uniform(0.005, 0.05) * attempt


def read(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in a read-only transaction (SQLite: no write lock taken)."""
    try:
        with engine.connect().execution_options(hai_read_only=True) as conn:
            try:
                return work(conn)
            finally:
                conn.rollback()
    except SQLAlchemyError as exc:
        raise _database_error("read", exc) from exc


class HeldConnection:
    """A connection kept checked out between uses: no pool check-out and pre-ping each time.

    ``get`` checks one out when none is held; ``drop`` gives it back -- when its user has
    nothing to do for a while, or after an error, so that the next ``get`` takes a fresh one.
    With ``autocommit`` each statement is its own transaction (``AutocommitLine``). One thread
    at a time.
    """

    def __init__(self, engine: Engine, autocommit: bool = False) -> None:
        self.engine = engine
        self._autocommit = autocommit
        self._conn: Connection | None = None

    def get(self) -> Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def drop(self, broken: bool = False) -> None:
        """Give it back (idle), or throw it away after an error (``broken``: closed, never
        returned to the pool, whose reset would send a ROLLBACK down a dead link and log its
        traceback). Never raises."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if broken:
                    conn.invalidate()
                conn.close()
            except Exception:  # gone already: the pool drops it
                logger.warning("closing a held connection failed", exc_info=True)

    def _connect(self) -> Connection:
        conn = self.engine.connect()
        if not self._autocommit:
            return conn
        options: dict[str, Any] = {"hai_autocommit": True}
        if dialect_kind(self.engine) != "sqlite":  # SQLite connections are in autocommit already
            options["isolation_level"] = "AUTOCOMMIT"
        # The statements run inside SQLAlchemy's autobegun transaction, which is never
        # ended: ending it would send a COMMIT or ROLLBACK the driver does not skip (PyMySQL).
        try:
            conn.execution_options(**options)  # PyMySQL: SET AUTOCOMMIT, which may fail
        except BaseException:
            with contextlib.suppress(SQLAlchemyError):
                conn.close()
            raise
        return conn


class AutocommitLine:
    """Single-statement reads in autocommit mode on one held connection: each read is one
    round trip -- no pool check-out and pre-ping, no ``BEGIN``, no ``ROLLBACK`` -- where a
    pooled read transaction costs four on PostgreSQL and MySQL. For the tick snapshot, which
    every node reads every second; the connection is one of the node's reserved ones
    (``RESERVED_CONNECTIONS``). A read that fails discards the connection; a dropped one
    (server restart, idle timeout) is replaced and the read tried once more at once.
    Thread-safe; ``close`` returns the connection to the pool."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._held = HeldConnection(engine, autocommit=True)
        self._lock = threading.Lock()

    def one(self, statement: Any) -> Any:
        """The one row of ``statement`` (a SELECT)."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    return self._held.get().execute(statement).one()
                except SQLAlchemyError as exc:
                    self._held.drop(broken=True)
                    dropped = isinstance(exc, DBAPIError) and exc.connection_invalidated
                    if attempt == 2 or not dropped:
                        raise _database_error("read", exc) from exc
                except BaseException:
                    self._held.drop(broken=True)  # interrupted mid-statement: the connection's state is unknown
                    raise
            raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._held.drop()


def _database_error(action: str, exc: SQLAlchemyError) -> DatabaseError:
    """A :class:`DatabaseError` for a failed ``action``, naming the driver's error (first line)."""
    orig = getattr(exc, "orig", None) or exc
    first_line = (str(orig).strip().splitlines() or [""])[0][:300]
    return DatabaseError(f"database {action} failed: {type(orig).__name__}: {first_line}")


def one_row(result: Any, what: str = "write") -> bool:
    """Whether a write meant for at most one row changed it: True for one row, False for none.

    More than one means the statement's key matched rows it was never meant to (a type or
    collation mismatch): raising rolls the transaction back, so nothing is changed.
    """
    count = int(result.rowcount)
    if count > 1:
        raise DatabaseError(f"{what} matched {count} rows where at most one was meant; rolled back, nothing changed")
    return count == 1
