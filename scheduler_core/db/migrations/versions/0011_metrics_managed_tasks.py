"""metrics and tasks as code: a node's last tick duration, and the file that created a task

- ``nodes.last_tick_ms``: how long the node's previous tick took (node clock, for ``/metrics``);
- ``tasks.managed_by``: the task file (``hai-scheduler tasks apply --source``) that created the
  task; ``tasks apply --prune`` deletes only tasks of its own source. NULL: made otherwise
  (dashboard, Python embedding), never pruned.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

COLUMNS: dict[str, list[sa.Column]] = {  # type: ignore[type-arg]
    "tasks": [sa.Column("managed_by", sa.String(length=128), nullable=True)],
    "nodes": [sa.Column("last_tick_ms", sa.BigInteger(), nullable=True)],
}


def upgrade() -> None:
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.add_column(column._copy())
    with op.batch_alter_table("tasks") as batch:
        batch.create_index("ix_tasks_managed_by", ["managed_by"])


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_managed_by")
    for table, columns in COLUMNS.items():
        with op.batch_alter_table(table) as batch:
            for column in reversed(columns):
                batch.drop_column(column.name)
