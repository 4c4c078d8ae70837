"""a node's view of a database clock jump: ``nodes.clock_jump_ms`` and ``nodes.clock_jump_at``

The last jump of the database clock against the node's own monotonic clock that the node saw
(positive: the database clock went ahead, as after a failover to a server whose clock is ahead),
and when, on the database clock (runtime/clock_watch.py). The nodes page, ``/healthz`` and the
``database.clock_jump`` alert read them. NULL: none seen.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("clock_jump_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("clock_jump_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("clock_jump_at")
        batch.drop_column("clock_jump_ms")
