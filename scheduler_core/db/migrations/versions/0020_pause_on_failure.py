"""pause on failure: ``tasks.pause_on_failure``, and an index for the ``task.paused`` alert

``pause_on_failure``: how many of the task's scheduled runs in a row must fail before it is
paused (1-100); NULL: never. ``(paused_at, id)``: the alert scan reads the tasks paused since its
cursor.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("pause_on_failure", sa.Integer(), nullable=True))
        batch.create_index("ix_tasks_paused_at_id", ["paused_at", "id"])


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_paused_at_id")
        batch.drop_column("pause_on_failure")
