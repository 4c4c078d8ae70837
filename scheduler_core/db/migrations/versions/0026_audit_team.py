"""the audit trail's team: ``audit_log.team``; the history of tasks deleted before teams

The team an entry is about (docs/teams.md): a task's, an execution's or a log's team, written
with the entry. NULL for an entry about no one team (users, tokens, templates, alert rules, a bulk
action across teams): such entries are shown to global users only. Existing entries about tasks,
executions and logs were all the one team's (``default``) and are marked so here.

Executions and logs of tasks deleted before teams existed (``team`` NULL and no task) are marked
``default``'s too: left NULL, they would belong to whichever team later makes a task of that id.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
        batch.create_index("ix_audit_log_team_at_id", ["team", "at", "id"])
    op.execute("UPDATE audit_log SET team = 'default' WHERE action LIKE 'task.%' OR action LIKE 'execution.%' "
               "OR action LIKE 'log.%'")
    for table in ("executions", "logs"):
        op.execute(f"UPDATE {table} SET team = 'default' WHERE team IS NULL "
                   f"AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.id = {table}.task_id)")


def downgrade() -> None:
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_index("ix_audit_log_team_at_id")
        batch.drop_column("team")
