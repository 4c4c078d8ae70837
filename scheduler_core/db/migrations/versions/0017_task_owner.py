"""a task's owner: ``tasks.owner``

The team or person operators contact about the task's runs: one line of text of at most 255
characters (``model.validate_task``), shown on the task's page and in the review of an unknown
run. NULL: none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("owner")
