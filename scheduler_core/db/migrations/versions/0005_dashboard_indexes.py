"""dashboard: indexes for keyset pages over the journal and the logs

Every list of the dashboard (journal, logs, dead letters) is a keyset page, newest first by (time, id). For each filter
the index must end in (time, id) right after the filter's equality column, so PostgreSQL
reads one index range in order and stops after a page: no sort, no OFFSET. The old
two-column indexes become prefixes of the new ones and are dropped (the new ones serve
every query the old ones did). New indexes are created before the old are dropped, so the
tables stay served while this runs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# (table, columns of the new index, columns of the index it replaces or None)
CHANGES: list[tuple[str, list[str], list[str] | None]] = [
    ("executions", ["created_at", "occurrence_id"], ["created_at"]),
    ("executions", ["status", "created_at", "occurrence_id"], None),
    ("executions", ["task_id", "created_at", "occurrence_id"], ["task_id", "created_at"]),
    ("executions", ["log_persistence", "updated_at", "occurrence_id"], ["log_persistence", "updated_at"]),
    ("logs", ["task_id", "started_at", "id"], ["task_id", "started_at"]),
    ("logs", ["status", "started_at", "id"], ["status", "started_at"]),
    ("logs", ["source", "started_at", "id"], ["source", "started_at"]),
    ("reach_queue", ["status", "updated_at", "queue_id"], ["status", "updated_at"]),
]


def _name(table: str, columns: list[str]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def upgrade() -> None:
    for table, columns, _old in CHANGES:
        op.create_index(op.f(_name(table, columns)), table, columns, unique=False)
    for table, _columns, old in CHANGES:
        if old is not None:
            op.drop_index(op.f(_name(table, old)), table_name=table)


def downgrade() -> None:
    for table, _columns, old in CHANGES:
        if old is not None:
            op.create_index(op.f(_name(table, old)), table, old, unique=False)
    for table, columns, _old in CHANGES:
        op.drop_index(op.f(_name(table, columns)), table_name=table)
