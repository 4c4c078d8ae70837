"""MySQL / MariaDB: compare text byte for byte, trailing spaces included

``utf8mb4_bin`` is a PAD SPACE collation: MariaDB compared ``'abc'`` and ``'abc '`` as equal, so
``unregister('abc ')`` deleted ``abc`` and a key ``'k '`` found the row of ``'k'``. Every table
moves to the binary NO PAD collation of its server (MariaDB ``utf8mb4_nopad_bin``, MySQL 8
``utf8mb4_0900_bin``), which compares as PostgreSQL and SQLite do. A NO PAD collation only
tells more values apart, so no unique key can be broken by it. The tables are rebuilt: on a
large database, run it in a quiet moment. Nothing changes on PostgreSQL and SQLite.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

from scheduler_core.db.tables import nopad_collation

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES = ("tasks", "slots", "executions", "logs", "nodes", "scheduler_meta", "reach_templates", "reach_queue",
          "users", "audit_log")


def _convert(collation: str) -> None:
    for table in TABLES:
        op.execute(text(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"))


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "mysql":
        _convert(nopad_collation(bind.dialect))


def downgrade() -> None:
    if op.get_bind().dialect.name == "mysql":
        _convert("utf8mb4_bin")
