"""team namespaces: ``teams``, ``team_grants``, ``tasks.team``, the history's ``team``, and the
global role made optional

- ``teams``: one row per team; ``default`` is made here, and every existing task is its.
- ``team_grants``: a user's role in a team (``viewer`` | ``operator`` | ``admin``).
- ``users.role`` becomes the global role (every team), NULL for none. Existing viewers and
  operators keep their role as a grant in ``default``; admins stay global admins.
- ``executions.team`` and ``logs.team``: NULL while the task they belong to lives in its team;
  written when the task moves or is deleted, so the history stays with the team it ran under
  (docs/teams.md).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from scheduler_core.db.tables import nopad_collation

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    mysql: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                             "mysql_collate": nopad_collation(bind.dialect)}
    op.create_table(
        "teams",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        **mysql,
    )
    op.create_table(
        "team_grants",
        sa.Column("username", sa.String(64), primary_key=True),
        sa.Column("team", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        **mysql,
    )
    op.create_index("ix_team_grants_team", "team_grants", ["team"])
    now = "(SELECT MAX(updated_at) FROM users)"
    op.execute("INSERT INTO teams (id, name, created_at, updated_at) VALUES ('default', 'Default', 0, 0)")
    op.execute(f"INSERT INTO team_grants (username, team, role, created_at) SELECT username, 'default', role, "
               f"COALESCE({now}, 0) FROM users WHERE role IN ('viewer', 'operator')")
    with op.batch_alter_table("users") as batch:
        batch.alter_column("role", existing_type=sa.String(16), nullable=True)
    op.execute("UPDATE users SET role = NULL WHERE role IN ('viewer', 'operator')")
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=False, server_default="default"))
        batch.create_index("ix_tasks_team_id", ["team", "id"])
    for table in ("executions", "logs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("team", sa.String(64), nullable=True))


def downgrade() -> None:
    for table in ("logs", "executions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("team")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_team_id")
        batch.drop_column("team")
    op.execute("UPDATE users SET role = (SELECT g.role FROM team_grants g WHERE g.username = users.username "
               "AND g.team = 'default') WHERE role IS NULL")
    op.execute("UPDATE users SET role = 'viewer' WHERE role IS NULL")
    with op.batch_alter_table("users") as batch:
        batch.alter_column("role", existing_type=sa.String(16), nullable=False)
    op.drop_index("ix_team_grants_team", "team_grants")
    op.drop_table("team_grants")
    op.drop_table("teams")
