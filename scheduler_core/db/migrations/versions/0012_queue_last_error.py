"""reach_queue.last_error: the real last failure of a delivery, class and a short masked message

``last_failure`` keeps the class the queue acts and filters on (``attempts_exhausted`` for a
letter that ran out of attempts); ``last_error`` says what actually went wrong the last time
(``transient_failure: SMTPServerDisconnected: ...``, ``permanent_rejection: HTTP 500``), so a dead
letter shows its cause. Written through ``scheduler_core.masking.mask_text``, at most 300
characters; never a body, a recipient or a secret.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reach_queue", sa.Column("last_error", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("reach_queue", "last_error")
