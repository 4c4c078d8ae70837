"""personal API tokens

- ``api_tokens``: one row per token a user (or an admin for them) created for the JSON API.
  The token is shown once; the row keeps its SHA-256 (``digest``), never the token. A token
  signs in as its user with the user's current role; revoking sets ``revoked_at``.
  ``window_start`` / ``window_count`` are the token's fixed rate-limit window, shared by every
  gunicorn worker because they live here.

New tables on MySQL / MariaDB take the binary NO PAD collation of migration 0006.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from scheduler_core.db.tables import nopad_collation

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    mysql: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                             "mysql_collate": nopad_collation(bind.dialect)}
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("last_used_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("window_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        **mysql,
    )
    op.create_index(op.f("ix_api_tokens_digest"), "api_tokens", ["digest"], unique=True)
    op.create_index(op.f("ix_api_tokens_username_created_at"), "api_tokens", ["username", "created_at"])


def downgrade() -> None:
    op.drop_table("api_tokens")
