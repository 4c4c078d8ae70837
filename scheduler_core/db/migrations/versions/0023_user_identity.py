"""single sign-on: ``users.identity``

The identity a user signs on with: the hex SHA-256 of the OpenID provider's issuer and the ID
token's subject (``sub``; both may be long), NULL for a local account (a password). Unique: one
dashboard user per person of the provider, and a local account of the same name is never taken
over by signing on (webapp/oidc.py).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("identity", sa.String(64), nullable=True))
        batch.create_index("ix_users_identity", ["identity"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_index("ix_users_identity")
        batch.drop_column("identity")
