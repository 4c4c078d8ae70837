"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29

The core tables: tasks, slots, executions (the journal), logs, nodes.
Frozen: later schema changes are new revisions, never edits here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
# InnoDB, utf8mb4, binary collation: ids compare byte-for-byte as on PostgreSQL and SQLite.
MYSQL: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "executions",
        sa.Column("occurrence_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=False),
        sa.Column("task_revision", sa.BigInteger(), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=128), nullable=True),
        sa.Column("idempotency_key", sa.String(length=128), nullable=True),
        sa.Column("scheduled_minute", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("execution_token", sa.String(length=64), nullable=True),
        sa.Column("owner_node", sa.String(length=128), nullable=True),
        sa.Column("lease_until", sa.BigInteger(), nullable=True),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("attempts", JSON, nullable=False),
        sa.Column("log_persistence", sa.String(length=16), nullable=True),
        sa.Column("resolved_by", sa.String(length=128), nullable=True),
        sa.Column("resolution_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("occurrence_id", name=op.f("pk_executions")),
        sa.UniqueConstraint("task_id", "idempotency_key", name=op.f("uq_executions_task_id_idempotency_key")),
        **MYSQL,
    )
    op.create_index(op.f("ix_executions_created_at"), "executions", ["created_at"], unique=False)
    op.create_index(
        op.f("ix_executions_log_persistence_updated_at"), "executions", ["log_persistence", "updated_at"], unique=False
    )
    op.create_index(op.f("ix_executions_owner_node_status"), "executions", ["owner_node", "status"], unique=False)
    op.create_index(op.f("ix_executions_status_lease_until"), "executions", ["status", "lease_until"], unique=False)
    op.create_index(op.f("ix_executions_status_updated_at"), "executions", ["status", "updated_at"], unique=False)
    op.create_index(op.f("ix_executions_task_id_created_at"), "executions", ["task_id", "created_at"], unique=False)
    op.create_table(
        "logs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("occurrence_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", JSON, nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_logs")),
        **MYSQL,
    )
    op.create_index(op.f("ix_logs_occurrence_id"), "logs", ["occurrence_id"], unique=False)
    op.create_index(op.f("ix_logs_source_started_at"), "logs", ["source", "started_at"], unique=False)
    op.create_index(op.f("ix_logs_started_at_id"), "logs", ["started_at", "id"], unique=False)
    op.create_index(op.f("ix_logs_status_started_at"), "logs", ["status", "started_at"], unique=False)
    op.create_index(op.f("ix_logs_task_id_started_at"), "logs", ["task_id", "started_at"], unique=False)
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", sa.BigInteger(), nullable=False),
        sa.Column("stopped_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_nodes")),
        **MYSQL,
    )
    op.create_index(op.f("ix_nodes_last_seen_at"), "nodes", ["last_seen_at"], unique=False)
    op.create_table(
        "slots",
        sa.Column("task_id", sa.String(length=128), nullable=False),
        sa.Column("occurrence_id", sa.String(length=64), nullable=True),
        sa.Column("execution_token", sa.String(length=64), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_slots")),
        **MYSQL,
    )
    op.create_index(op.f("ix_slots_occurrence_id"), "slots", ["occurrence_id"], unique=False)
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("cron", sa.String(length=255), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("delete_after_run", sa.Boolean(), nullable=False),
        sa.Column("idempotent", sa.Boolean(), nullable=False),
        sa.Column("retry", JSON, nullable=True),
        sa.Column("handler", JSON, nullable=True),
        sa.Column("params", JSON, nullable=True),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        **MYSQL,
    )
    op.create_index(op.f("ix_tasks_enabled_id"), "tasks", ["enabled", "id"], unique=False)
    op.create_index(op.f("ix_tasks_updated_at"), "tasks", ["updated_at"], unique=False)


def downgrade() -> None:
    for table in ("tasks", "slots", "nodes", "logs", "executions"):
        op.drop_table(table)
