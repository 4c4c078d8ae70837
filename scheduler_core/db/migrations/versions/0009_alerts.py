"""alerts: rules, facts (one per rule and fact, so a fact alerts once), throttles, urgent queue rows

- ``alert_rules``: rules stored from the dashboard (rules from the configuration live in memory);
- ``alert_facts``: (rule, event key) seen, and the alert it went out with (or folded into);
- ``alert_throttles``: per rule and task (or event), when the last alert went out and how many
  facts were folded since;
- ``reach_queue.urgent`` (delivered during do-not-disturb too) and ``reach_queue.alert_rule``.

Revision ID: 0009
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from scheduler_core.db.tables import nopad_collation

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    bind = op.get_bind()
    mysql: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                             "mysql_collate": nopad_collation(bind.dialect)}
    op.create_table(
        "alert_rules",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("definition", JSON, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_alert_rules")),
        **mysql,
    )
    op.create_table(
        "alert_facts",
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("event_key", sa.String(length=255), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("scope", sa.String(length=128), nullable=False),
        sa.Column("queue_id", sa.String(length=36), nullable=True),
        sa.Column("folded", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("rule", "event_key", name=op.f("pk_alert_facts")),
        **mysql,
    )
    op.create_index(op.f("ix_alert_facts_created_at"), "alert_facts", ["created_at"], unique=False)
    op.create_table(
        "alert_throttles",
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=128), nullable=False),
        sa.Column("last_sent_at", sa.BigInteger(), nullable=False),
        sa.Column("folded", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("rule", "scope", name=op.f("pk_alert_throttles")),
        **mysql,
    )
    with op.batch_alter_table("reach_queue") as batch:
        batch.add_column(sa.Column("urgent", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("alert_rule", sa.String(length=128), nullable=True))
    op.create_index(op.f("ix_reach_queue_alert_rule_created_at"), "reach_queue", ["alert_rule", "created_at"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_reach_queue_alert_rule_created_at"), table_name="reach_queue")
    with op.batch_alter_table("reach_queue") as batch:
        batch.drop_column("alert_rule")
        batch.drop_column("urgent")
    op.drop_table("alert_throttles")
    op.drop_index(op.f("ix_alert_facts_created_at"), table_name="alert_facts")
    op.drop_table("alert_facts")
    op.drop_table("alert_rules")
