"""notifications and alert rules per team: ``reach_queue.team``, ``alert_rules.team``

A queued message is the team's whose task it is about (an alert about a task's run or pause);
NULL for a message about no one team (a node lost, the cluster idle, a message the application
sent itself): such rows are shown to global users only. An alert rule's team is the team whose
tasks it covers; NULL is a global rule, as every rule was before (docs/teams.md).

Alerts already queued about a task are marked with that task's team (``default`` when the task is
gone: every task was default's before teams).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

TASK_EVENTS = ("'execution.unknown', 'execution.failed', 'execution.missed', 'task.blocked', 'task.paused', "
               "'log.pending'")


def upgrade() -> None:
    with op.batch_alter_table("reach_queue") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
        batch.create_index("ix_reach_queue_team_status_updated_at_queue_id", ["team", "status", "updated_at",
                                                                               "queue_id"])
    with op.batch_alter_table("alert_rules") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
    about_a_task = f"f.queue_id = reach_queue.queue_id AND f.event IN ({TASK_EVENTS})"
    op.execute("UPDATE reach_queue SET team = COALESCE((SELECT t.team FROM alert_facts f "
               f"JOIN tasks t ON t.id = f.scope WHERE {about_a_task}), 'default') WHERE alert_rule IS NOT NULL "
               f"AND EXISTS (SELECT 1 FROM alert_facts f WHERE {about_a_task})")


def downgrade() -> None:
    with op.batch_alter_table("alert_rules") as batch:
        batch.drop_column("team")
    with op.batch_alter_table("reach_queue") as batch:
        batch.drop_index("ix_reach_queue_team_status_updated_at_queue_id")
        batch.drop_column("team")
