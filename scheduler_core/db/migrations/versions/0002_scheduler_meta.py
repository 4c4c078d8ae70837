"""scheduler_meta: named counters (tasks_version for cheap change detection)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "scheduler_meta",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_meta")),
        **MYSQL,
    )
    op.bulk_insert(meta, [{"name": "tasks_version", "value": 0}])


def downgrade() -> None:
    op.drop_table("scheduler_meta")
