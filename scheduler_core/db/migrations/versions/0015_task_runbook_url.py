"""a task's runbook link: ``tasks.runbook_url``

Where an operator reads what to do when a run of the task fails or its outcome is unknown: an
http(s) URL of at most 2048 characters (``model.check_link``), shown on the task's page. NULL: none.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("runbook_url", sa.String(length=2048), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("runbook_url")
