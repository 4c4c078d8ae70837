"""dashboard sessions and failed sign-ins

- ``user_sessions``: one row per signed-in session; the cookie holds a random token and the row
  its SHA-256. Logout, a password reset, disabling and a role change delete the rows, so a copied
  cookie stops working at once; idle and old sessions expire (``expires_at``).
- ``login_failures``: failed sign-ins of the last window by client address and account name,
  shared by every worker (the throttle used to live in each worker's memory).

New tables on MySQL / MariaDB take the binary NO PAD collation of migration 0006.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _mysql_options() -> dict[str, Any]:
    bind = op.get_bind()
    mariadb = bool(getattr(bind.dialect, "is_mariadb", False))
    return {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
            "mysql_collate": "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"}


def upgrade() -> None:
    mysql = _mysql_options()
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_sessions")),
        **mysql,
    )
    op.create_index(op.f("ix_user_sessions_username"), "user_sessions", ["username"])
    op.create_index(op.f("ix_user_sessions_expires_at"), "user_sessions", ["expires_at"])
    op.create_table(
        "login_failures",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
        **mysql,
    )
    op.create_index(op.f("ix_login_failures_address_at"), "login_failures", ["address", "at"])
    op.create_index(op.f("ix_login_failures_username_at"), "login_failures", ["username", "at"])
    op.create_index(op.f("ix_login_failures_at"), "login_failures", ["at"])


def downgrade() -> None:
    op.drop_table("login_failures")
    op.drop_table("user_sessions")
