"""reach: templates and the durable delivery queue

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reach_templates",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_reach_templates")),
        **MYSQL,
    )
    op.create_table(
        "reach_queue",
        sa.Column("queue_id", sa.String(length=36), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("template", sa.String(length=128), nullable=True),
        sa.Column("recipient", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("extra", JSON, nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("retry_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("max_retry_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=False),
        sa.Column("locked_by", sa.String(length=128), nullable=True),
        sa.Column("lock_token", sa.String(length=64), nullable=True),
        sa.Column("locked_until", sa.BigInteger(), nullable=True),
        sa.Column("last_failure", sa.String(length=32), nullable=True),
        sa.Column("message_id", sa.String(length=255), nullable=True),
        sa.Column("resolved_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue_id", name=op.f("pk_reach_queue")),
        **MYSQL,
    )
    op.create_index(op.f("ix_reach_queue_status_next_attempt_at"), "reach_queue", ["status", "next_attempt_at"])
    op.create_index(op.f("ix_reach_queue_status_locked_until"), "reach_queue", ["status", "locked_until"])
    op.create_index(op.f("ix_reach_queue_status_updated_at"), "reach_queue", ["status", "updated_at"])


def downgrade() -> None:
    op.drop_table("reach_queue")
    op.drop_table("reach_templates")
