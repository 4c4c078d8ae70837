"""Alembic environment: runs on the connection that ``scheduler_core.db.migrate`` hands in.

The caller already holds the migration lock and an open transaction on that connection
(see migrate.py), so two processes upgrading at once run one after the other.
"""

from __future__ import annotations

from alembic import context

from scheduler_core.db.migrate import VERSION_TABLE
from scheduler_core.db.tables import metadata
from scheduler_core.errors import MigrationError

connection = context.config.attributes.get("connection")
if connection is None:
    raise MigrationError("run migrations with `hai-scheduler db upgrade` (scheduler_core.db.migrate.upgrade)")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
