"""Schema migrations (Alembic) under a database-wide lock, so they are safe twice and from two
processes at once: PostgreSQL ``pg_advisory_xact_lock``, MySQL ``GET_LOCK`` (on Galera, whose
``GET_LOCK`` holds on one node only, a certified lock row: db/galera.py), SQLite ``BEGIN
IMMEDIATE`` (docs/architecture.md, "The database layer")."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from scheduler_core.db.engine import dialect_kind
from scheduler_core.db.galera import LockTimeoutError, cluster_lock, galera_node
from scheduler_core.errors import DatabaseConnectionError, MigrationError

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "hai_schema_version"
_PG_LOCK_KEY = 0x4841495343484544  # "HAISCHED"
_MYSQL_LOCK_NAME = "hai_scheduler_migrate"
_MYSQL_LOCK_WAIT_S = 120


@dataclass(frozen=True)
class MigrationState:
    """Where a database's schema stands."""

    current: str | None  # revision applied, None for an empty database
    head: str  # newest revision this code knows
    previous: str | None = None  # upgrade() only: the revision found under the migration lock

    @property
    def changed(self) -> bool:
        return self.previous != self.current

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise MigrationError("no migrations found")
    return head


def migration_state(engine: Engine) -> MigrationState:
    """The schema's revision and the code's head; DatabaseConnectionError when the database does not answer."""
    try:
        with engine.connect().execution_options(hai_read_only=True) as conn:
            current = _current_revision(conn)
            conn.rollback()
    except SQLAlchemyError as exc:
        raise DatabaseConnectionError(f"reading the schema revision failed: {type(exc).__name__}: "
                                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc
    return MigrationState(current=current, head=head_revision())


def upgrade(engine: Engine, revision: str = "head") -> MigrationState:
    """Apply migrations up to ``revision``; a no-op when already there."""
    try:
        with _migration_lock(engine) as conn:
            previous = _current_revision(conn)
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    except MigrationError:
        raise
    except Exception as exc:
        raise MigrationError(f"schema upgrade failed: {type(exc).__name__}: {exc}") from exc
    state = migration_state(engine)
    return MigrationState(current=state.current, head=state.head, previous=previous)


def _galera_locked(conn: Connection) -> Iterator[Connection]:
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    try:
        with cluster_lock(conn.engine, _MYSQL_LOCK_NAME, holder, _MYSQL_LOCK_WAIT_S), conn.begin():
            yield conn
    except LockTimeoutError as exc:
        raise MigrationError(f"another process held the migration lock for {_MYSQL_LOCK_WAIT_S} s") from exc


def _current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[Connection]:
    kind = dialect_kind(engine)
    with engine.connect() as conn:
        if kind == "mysql":
            yield from _mysql_locked(conn)
            return
        with conn.begin():
            if kind == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            yield conn


def _mysql_locked(conn: Connection) -> Iterator[Connection]:
    if galera_node(conn) is not None:  # GET_LOCK holds on one Galera node only
        conn.rollback()
        yield from _galera_locked(conn)
        return
    got = conn.execute(text("SELECT GET_LOCK(:name, :wait)"),
                       {"name": _MYSQL_LOCK_NAME, "wait": _MYSQL_LOCK_WAIT_S}).scalar()
    conn.commit()
    if got != 1:
        raise MigrationError(f"another process held the migration lock for {_MYSQL_LOCK_WAIT_S} s")
    try:
        with conn.begin():
            yield conn
    finally:
        conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_LOCK_NAME})
        conn.commit()
