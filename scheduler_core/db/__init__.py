"""Database layer: configuration, engine, the DB clock, tables and migrations."""

import scheduler_core.db.account_tables  # noqa: F401  (puts the account tables on the one metadata)
from scheduler_core.db.clock import db_now_ms, db_statement_now_ms, optional_ms, to_ms
from scheduler_core.db.config import DatabaseConfig, TlsConfig, parse_database_config
from scheduler_core.db.engine import (
    close_engine,
    create_engine,
    database_config,
    dialect_kind,
    engine_options,
    health_check,
    pool_capacity,
    prepare_engine,
)
from scheduler_core.db.migrate import MigrationState, migration_state, upgrade

__all__ = [
    "DatabaseConfig",
    "MigrationState",
    "TlsConfig",
    "close_engine",
    "create_engine",
    "database_config",
    "db_now_ms",
    "db_statement_now_ms",
    "dialect_kind",
    "engine_options",
    "health_check",
    "migration_state",
    "optional_ms",
    "parse_database_config",
    "pool_capacity",
    "prepare_engine",
    "to_ms",
    "upgrade",
]
