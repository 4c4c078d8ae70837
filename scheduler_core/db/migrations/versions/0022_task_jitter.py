"""jitter: ``tasks.jitter_ms``, and the queued rows' start time

``jitter_ms``: each scheduled occurrence of the task starts up to this many milliseconds after its
minute, by an amount derived from its occurrence id; NULL: none. Such an occurrence is journaled
``queued`` at its minute (reason ``jitter``) with ``executions.next_attempt_at`` (a column until
now unused) as the time before which no node claims it.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("jitter_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("jitter_ms")
