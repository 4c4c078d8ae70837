"""metric_totals: monotonic totals for ``/metrics`` counters

One row per (metric, scope, label): ``value`` only grows. Writers add to it in the same
transaction as the transition it counts (``scheduler_core/store/totals.py``), with one grouped
upsert per commit, so a rolled-back transition counts nothing and a committed one counts once.
Nothing deletes these rows: journal retention and task deletion leave them, so a counter never
goes down. ``scope`` is a task id (a provider for deliveries); ``created_at`` is when the row was
first written (DB clock), the stable order that decides which tasks get their own series.

New tables on MySQL / MariaDB take the binary NO PAD collation of migration 0006.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from scheduler_core.db.tables import nopad_collation

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    mysql: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                             "mysql_collate": nopad_collation(bind.dialect)}
    op.create_table(
        "metric_totals",
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=128), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "scope", "label", name=op.f("pk_metric_totals")),
        **mysql,
    )


def downgrade() -> None:
    op.drop_table("metric_totals")
