"""Engine creation, per-dialect session set-up (``prepare_engine``: SQLite WAL, busy timeout and
``BEGIN IMMEDIATE`` for writers; READ COMMITTED and UTC sessions on the servers), health check and
explicit close (docs/architecture.md, "The database layer")."""

from __future__ import annotations

import functools
import math
import sqlite3
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import event, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from scheduler_core.db import galera
from scheduler_core.db.clock import db_now_ms, to_ms
from scheduler_core.db.config import DatabaseConfig, check_production_guard, parse_database_config
from scheduler_core.errors import DatabaseCloseError, DatabaseConnectionError

DialectKind = Literal["sqlite", "postgresql", "mysql"]

_configs: weakref.WeakKeyDictionary[Engine, DatabaseConfig] = weakref.WeakKeyDictionary()
_prepared: weakref.WeakSet[Engine] = weakref.WeakSet()


def create_engine(
    database: str | Mapping[str, Any] | DatabaseConfig,
    *,
    environ: Mapping[str, str] | None = None,
    echo: bool = False,
) -> Engine:
    """Create a health-checked engine from a URL, a mapping or a :class:`DatabaseConfig`.

    Raises :class:`DatabaseConfigError` (bad value, naming the field) before anything is
    created, or :class:`DatabaseConnectionError` when the health check fails.
    """
    config = parse_database_config(database)
    check_production_guard(config, environ)
    engine = sa.create_engine(config.sqlalchemy_url(), echo=echo, **engine_options(config))
    prepare_engine(engine, busy_timeout_ms=config.busy_timeout_ms)
    try:
        _round_trip(engine)
    except Exception as exc:
        engine.dispose()
        target = config.redacted()["url"]
        raise DatabaseConnectionError(f"health check of {target} failed: {_describe(exc)}") from exc
    _configs[engine] = config
    return engine


def prepare_engine(engine: Engine, *, busy_timeout_ms: int = 30_000) -> Engine:
    """Install the session set-up on ``engine`` (idempotent). Call before first use."""
    if engine in _prepared:
        return engine
    kind = dialect_kind(engine)
    if kind == "sqlite":
        event.listen(engine, "connect", functools.partial(_sqlite_on_connect, busy_timeout_ms))
        event.listen(engine, "begin", _sqlite_on_begin)
    elif kind == "mysql":
        event.listen(engine, "connect", _mysql_on_connect)
        event.listen(engine, "handle_error", _mysql_node_not_ready)
    else:
        event.listen(engine, "handle_error", _pg_not_the_primary)
    _prepared.add(engine)
    return engine


def pool_capacity(engine: Engine) -> int | None:
    """How many connections ``engine``'s pool can hand out at once (size plus overflow); None
    for a pool without a bound (e.g. ``NullPool``)."""
    size = getattr(engine.pool, "size", None)
    if not callable(size):
        return None
    return int(size()) + max(0, int(getattr(engine.pool, "_max_overflow", 0)))


def health_check(engine: Engine) -> int:
    """Round-trip to the database; returns its clock in unix ms. A database that does not answer
    (down, unreachable, no primary yet) is :class:`DatabaseConnectionError`, never a driver error."""
    try:
        return _round_trip(engine)
    except SQLAlchemyError as exc:
        raise DatabaseConnectionError(f"the database did not answer: {_describe(exc)}") from exc


def _round_trip(engine: Engine) -> int:
    with engine.connect().execution_options(hai_read_only=True) as conn:
        value = to_ms(conn.execute(select(db_now_ms())).scalar_one(), "db_now_ms")
        conn.rollback()
    return value


def close_engine(engine: Engine) -> None:
    """Close every pooled connection. Raises :class:`DatabaseCloseError` on failure."""
    try:
        engine.dispose()
    except Exception as exc:
        raise DatabaseCloseError(f"closing the database engine failed: {_describe(exc)}") from exc
    _configs.pop(engine, None)


def database_config(engine: Engine) -> DatabaseConfig | None:
    """The configuration an engine was created from (None for engines made elsewhere)."""
    return _configs.get(engine)


def dialect_kind(bind: Engine | Connection) -> DialectKind:
    name = bind.dialect.name
    if name == "sqlite":
        return "sqlite"
    if name == "postgresql":
        return "postgresql"
    if name in ("mysql", "mariadb"):
        return "mysql"
    raise DatabaseConnectionError(f"unsupported database dialect {name!r}")


# --- per-dialect set-up ----------------------------------------------------------


def engine_options(config: DatabaseConfig) -> dict[str, Any]:
    """Keyword arguments for ``sqlalchemy.create_engine`` (also for Flask-SQLAlchemy)."""
    options: dict[str, Any] = {
        "pool_size": config.pool_size,
        "max_overflow": 0,
        "pool_timeout": config.acquire_timeout_ms / 1000,
        "pool_pre_ping": config.type != "sqlite",
    }
    connect_seconds = max(1, math.ceil(config.connect_timeout_ms / 1000))
    if config.type == "sqlite":
        options["poolclass"] = sa.pool.QueuePool
        options["connect_args"] = {"timeout": config.busy_timeout_ms / 1000, "check_same_thread": False}
    elif config.type == "postgresql":
        options["isolation_level"] = "READ COMMITTED"
        # prepare_threshold=None: psycopg never prepares server-side, so every statement is
        # planned for the table as it is now. A prepared statement keeps the generic plan it
        # got early on -- for a journal that was nearly empty then, or whose statistics say
        # few rows run -- and a burst of 10,000 running rows made those plans scan every
        # running row per statement (0.1-0.3 s each; bench/RESULTS.md section 1). Planning
        # these statements costs well under a millisecond; our side still compiles each once.
        options["connect_args"] = {
            "connect_timeout": connect_seconds, "application_name": "hai-scheduler", "prepare_threshold": None,
            **_pg_tls(config)}
    else:
        options["isolation_level"] = "READ COMMITTED"
        options["connect_args"] = {"connect_timeout": connect_seconds, "charset": "utf8mb4", **_mysql_tls(config)}
    return options


def _pg_tls(config: DatabaseConfig) -> dict[str, Any]:
    tls = config.tls
    if tls is None:
        return {}
    args: dict[str, Any] = {"sslmode": "verify-full" if tls.verify else "require"}
    for key, name in (("ca", "sslrootcert"), ("cert", "sslcert"), ("key", "sslkey")):
        if getattr(tls, key):
            args[name] = getattr(tls, key)
    return args


def _mysql_tls(config: DatabaseConfig) -> dict[str, Any]:
    tls = config.tls
    if tls is None:
        return {}
    args: dict[str, Any] = {"ssl_verify_cert": tls.verify, "ssl_verify_identity": tls.verify}
    for key in ("ca", "cert", "key"):
        if getattr(tls, key):
            args[f"ssl_{key}"] = getattr(tls, key)
    if not any(getattr(tls, key) for key in ("ca", "cert", "key")):
        args["ssl"] = {}  # TLS with the system trust store
    return args


def _sqlite_on_connect(busy_ms: int, dbapi_connection: Any, connection_record: Any) -> None:
    # Hand transaction control to SQLAlchemy's "begin" event below (pysqlite would
    # otherwise start its own deferred transactions).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching a fresh file to WAL needs the lock too.
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        _sqlite_use_wal(cursor, busy_ms)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_use_wal(cursor: Any, busy_ms: int) -> None:
    """Switch the file to WAL (it stays so). Two processes opening a fresh file at once
    (two ``db upgrade`` runs, gunicorn workers starting) both try to switch it, and SQLite
    answers the loser "database is locked" at once, without its busy handler: wait and look
    again, within the busy timeout -- usually the other one has switched it meanwhile."""
    deadline = time.monotonic() + busy_ms / 1000
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        threading.Event().wait(0.02)  # not time.sleep: see scheduler_core.store.transactions._pause


def _sqlite_on_begin(conn: Connection) -> None:
    options = conn.get_execution_options()
    if options.get("hai_autocommit", False):
        return  # each statement its own implicit transaction (store.transactions.AutocommitLine)
    read_only = options.get("hai_read_only", False)
    conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


# The server this connection reached is no longer a writable primary: a standby refusing a write
# (25006, after a failover demoted it), or shutting down (57P01 admin_shutdown, 57P02 crash_shutdown,
# 57P03 cannot_connect_now).
NOT_THE_PRIMARY = frozenset({"25006", "57P01", "57P02", "57P03"})


def _pg_not_the_primary(context: Any) -> None:
    """Treat "not the primary" as a lost connection: SQLAlchemy then invalidates this connection
    and every one the pool checked out before it, so the next check-out connects afresh and libpq
    (``target_session_attrs=read-write``) finds the writable host. Nothing was committed: the
    statement was refused."""
    code = getattr(context.original_exception, "sqlstate", None)
    if code in NOT_THE_PRIMARY:
        context.is_disconnect = True


# MySQL / MariaDB: 1047, a Galera node without quorum ("WSREP has not yet prepared node for
# application use"). On a Galera session also 1205, mostly its causal wait timing out while the
# node cannot reach the group (repl.causal_read_timeout), before it knows it has lost quorum, and
# 1180 at COMMIT ("... provider status: Not connected to Primary Component"): nothing committed.
_WSREP_NOT_READY = 1047
_GALERA_CUT_OFF = frozenset({1180, 1205})


def _mysql_node_not_ready(context: Any) -> None:
    """Treat a Galera node that cannot serve as a lost connection, as ``_pg_not_the_primary``
    treats a standby: the connection is invalidated (no rollback on a node that refuses every
    statement; the pool's reset of it would fail, with a traceback), and the caller sees an
    unreachable database (db/outage.py) that it asks again once the node has rejoined."""
    args = getattr(context.original_exception, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    galera = context.connection is not None and bool(context.connection.info.get("galera"))
    if code == _WSREP_NOT_READY or (code in _GALERA_CUT_OFF and galera):
        context.is_disconnect = True


def _mysql_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        connection_record.info["galera"] = galera.on_connect(cursor)
    finally:
        cursor.close()
    # PyMySQL runs with autocommit off; SET statements opened nothing to keep.
    dbapi_connection.commit()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
