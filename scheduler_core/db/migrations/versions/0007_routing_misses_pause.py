"""routing, misses and pauses: node groups and capabilities, catch-up policies, missed ranges,
task pauses, and the cluster's tick watermark

- ``tasks.node_group`` (a task runs only on nodes in that group), ``tasks.catchup`` (JSON policy),
  ``tasks.paused_at / paused_until / paused_by / paused_reason`` (no cron occurrences while paused);
- ``nodes.capabilities`` and ``nodes.node_groups`` (JSON lists a node advertises in its heartbeat);
- ``executions.missed_until`` and ``missed_count``: a summary ``missed`` row stands for the
  occurrences from its ``scheduled_minute`` through ``missed_until``;
- ``scheduler_meta.ticked_through``: the last minute the cluster planned (a gap after it is downtime).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
COLUMNS: dict[str, list[sa.Column]] = {  # type: ignore[type-arg]
    "tasks": [
        sa.Column("node_group", sa.String(length=64), nullable=True),
        sa.Column("catchup", JSON, nullable=True),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("paused_until", sa.BigInteger(), nullable=True),
        sa.Column("paused_by", sa.String(length=128), nullable=True),
        sa.Column("paused_reason", sa.Text(), nullable=True),
    ],
    "nodes": [
        sa.Column("capabilities", JSON, nullable=True),
        sa.Column("node_groups", JSON, nullable=True),
    ],
    "executions": [
        sa.Column("missed_until", sa.BigInteger(), nullable=True),
        sa.Column("missed_count", sa.Integer(), nullable=True),
    ],
}


def upgrade() -> None:
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(column._copy())
    op.execute(sa.text("INSERT INTO scheduler_meta (name, value) VALUES ('ticked_through', 0)"))


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM scheduler_meta WHERE name = 'ticked_through'"))
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in reversed(columns):
                batch.drop_column(column.name)
