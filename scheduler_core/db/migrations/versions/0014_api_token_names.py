"""API token names unique per user; a token's prefix; a token sealed for its one display

- ``api_tokens (username, name)`` is unique, revoked tokens included: a name says which token it
  is in the list, the audit trail and the revoke confirmation. Duplicates made before are renamed
  first: the oldest keeps the name, the next ones get `` (2)``, `` (3)``, ... (cut to fit 64
  characters, and never onto a name the user already has).
- ``prefix``: the token's first characters (``hai_Ab3xYz``), shown beside its name so that a person
  holding a copy can tell which row it is. NULL for the tokens made before: nobody kept them.
- ``sealed_secret``: the new token XOR a one-time pad that only the creating browser's session
  holds, from the form's POST until the page that shows the token once (post/redirect/get), then
  NULL. Neither half alone tells anything of the token.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

MAX_NAME = 64
_tokens = sa.table("api_tokens", sa.column("id", sa.String), sa.column("username", sa.String),
                   sa.column("name", sa.String), sa.column("created_at", sa.BigInteger))


def renamed(rows: list[tuple[str, str, str]]) -> dict[str, str]:
    """The new name of each duplicate among ``rows`` (id, username, name), oldest first: id -> name."""
    taken = {(username, name) for _id, username, name in rows}
    seen: set[tuple[str, str]] = set()
    changes: dict[str, str] = {}
    for token_id, username, name in rows:
        if (username, name) not in seen:
            seen.add((username, name))
            continue
        number = 2
        while True:
            suffix = f" ({number})"
            candidate = name[:MAX_NAME - len(suffix)] + suffix
            if (username, candidate) not in taken:
                break
            number += 1
        taken.add((username, candidate))
        seen.add((username, candidate))
        changes[token_id] = candidate
    return changes


def upgrade() -> None:
    bind = op.get_bind()
    query = sa.select(_tokens.c.id, _tokens.c.username, _tokens.c.name).order_by(
        _tokens.c.username, _tokens.c.created_at, _tokens.c.id)
    rows = [(str(r.id), str(r.username), str(r.name)) for r in bind.execute(query)]
    for token_id, name in renamed(rows).items():
        bind.execute(sa.update(_tokens).where(_tokens.c.id == token_id).values(name=name))
    op.add_column("api_tokens", sa.Column("prefix", sa.String(length=16), nullable=True))
    op.add_column("api_tokens", sa.Column("sealed_secret", sa.String(length=128), nullable=True))
    op.create_index(op.f("ix_api_tokens_username_name"), "api_tokens", ["username", "name"], unique=True)


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_username_name"), table_name="api_tokens")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("sealed_secret")
        batch.drop_column("prefix")
