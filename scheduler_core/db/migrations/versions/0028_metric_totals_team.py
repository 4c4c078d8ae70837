"""the metric totals per team: ``metric_totals.team``, part of the key

A count is made under the team its task is in at that moment (store/totals.py), so a team's
``/metrics`` series hold only what was counted in that team: a task moved, deleted, or whose id is
made again in another team leaves its earlier counts to the team they were made in. Existing rows
are given their task's team now, or, for a task gone, the team its history rows were left with
(migration 0026 gave those of tasks deleted before teams ``default``); "" when neither is known,
and for deliveries and lock rows. The primary key becomes (metric, scope, label, team).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

KEY = ["metric", "scope", "label"]


def upgrade() -> None:
    with op.batch_alter_table("metric_totals") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=False, server_default=""))
    op.execute("UPDATE metric_totals SET team = COALESCE("
               "(SELECT t.team FROM tasks t WHERE t.id = metric_totals.scope), "
               "(SELECT MAX(e.team) FROM executions e WHERE e.task_id = metric_totals.scope), '') "
               "WHERE metric NOT IN ('deliveries', 'task')")
    with op.batch_alter_table("metric_totals") as batch:
        batch.drop_constraint("pk_metric_totals", type_="primary")
        batch.create_primary_key("pk_metric_totals", [*KEY, "team"])


def downgrade() -> None:
    bind = op.get_bind()
    summed = bind.execute(sa.text("SELECT metric, scope, label, SUM(value), MIN(created_at) FROM metric_totals "
                                  "GROUP BY metric, scope, label")).all()
    op.execute("DELETE FROM metric_totals")
    with op.batch_alter_table("metric_totals") as batch:
        batch.drop_constraint("pk_metric_totals", type_="primary")
        batch.drop_column("team")
        batch.create_primary_key("pk_metric_totals", KEY)
    if summed:
        bind.execute(sa.text("INSERT INTO metric_totals (metric, scope, label, value, created_at) "
                             "VALUES (:metric, :scope, :label, :value, :created_at)"),
                     [{"metric": m, "scope": s, "label": lb, "value": int(v), "created_at": int(c)}
                      for m, s, lb, v, c in summed])
