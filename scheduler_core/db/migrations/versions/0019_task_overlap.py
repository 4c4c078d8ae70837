"""a task's overlap policy: ``tasks.overlap``

What a cron occurrence does while the task's slot is held (``task_policies.OverlapPolicy``), as a
JSON document: ``{"policy": "skip" | "buffer_one" | "buffer_all" | "cancel_other" |
"terminate_other", "buffer_limit": N}``. NULL: skip (the rule before this column).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None
JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("overlap", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("overlap")
