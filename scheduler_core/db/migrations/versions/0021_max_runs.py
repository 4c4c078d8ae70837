"""a limit on a task's scheduled runs: ``tasks.max_runs``, ``runs_counted``, ``limit_reached_at``

``max_runs``: after this many scheduled runs (cron and catch-up) have started, the task disables
itself; NULL: no limit. ``runs_counted``: how many have started since the task was created or
enabled again after reaching its limit (0 for existing tasks). ``limit_reached_at``: the DB time
the task disabled itself on reaching the limit -- the marker that lets the last run, still going,
end as its handler says, where an operator's disable stops a run.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("max_runs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("runs_counted", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("limit_reached_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("limit_reached_at")
        batch.drop_column("runs_counted")
        batch.drop_column("max_runs")
