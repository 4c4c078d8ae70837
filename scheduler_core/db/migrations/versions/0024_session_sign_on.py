"""single sign-on state of a session: ``user_sessions.sign_on``

For a session signed on with the identity provider: the subject, the access token the groups are
read again with, and when they were last read and last answered (JSON). Kept on the server with
the session, not in the cookie: a provider's access token can be kilobytes long, and a copy of
the cookie should carry nothing the provider accepts. NULL for a local account's session.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("user_sessions") as batch:
        batch.add_column(sa.Column("sign_on", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("user_sessions") as batch:
        batch.drop_column("sign_on")
