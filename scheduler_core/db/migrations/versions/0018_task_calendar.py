"""a task's calendar: ``tasks.calendar``

When the task's cron may fire at all (``task_policies.Calendar``), as a JSON document:
``{"active_from_ms": N | null, "active_until_ms": N | null, "exclude": ["YYYY-MM-DD" | cron, ...]}``.
A minute outside the window, on an excluded date or named by an excluded expression is not due.
NULL: none (every minute the cron names is due, as before this column).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("calendar", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("calendar")
