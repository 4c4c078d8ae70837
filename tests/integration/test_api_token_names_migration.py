"""Migration 0014 on every database: duplicate token names of a user are renamed (the oldest
keeps the name; `` (2)``, `` (3)``... cut to 64 characters and never onto a name taken), then
the unique index on (username, name) refuses any new duplicate, revoked tokens included."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from scheduler_core.db import close_engine, create_engine, upgrade
from scheduler_core.db.account_tables import api_tokens
from tests.conftest import TestDatabase

LONG = "x" * 64


def _token(token_id: str, name: str, created_at: int, username: str = "admin", **extra: Any) -> dict[str, Any]:
    return {"id": token_id, "username": username, "name": name, "digest": f"{token_id:0>64}",
            "created_at": created_at, "expires_at": None, "last_used_at": None, "revoked_at": None, "window_start": 0,
            "window_count": 0, **extra}


BEFORE = [
    _token("1", "ci", 1), _token("2", "ci", 2, revoked_at=5), _token("3", "ci", 3), _token("4", "ci (2)", 4),
    _token("5", LONG, 5), _token("6", LONG, 6), _token("7", "ci", 7, username="grafana"), _token("8", "solo", 8),
]
AFTER = {"1": "ci", "2": "ci (3)", "3": "ci (4)", "4": "ci (2)", "5": LONG, "6": "x" * 60 + " (2)", "7": "ci",
         "8": "solo"}


# api_tokens as migration 0013 left it: without the columns 0014 adds.
V0013 = Table("api_tokens", MetaData(), Column("id", String(36), primary_key=True), Column("username", String(64)),
              Column("name", String(64)), Column("digest", String(64)), Column("created_at", BigInteger),
              Column("expires_at", BigInteger), Column("last_used_at", BigInteger), Column("revoked_at", BigInteger),
              Column("window_start", BigInteger), Column("window_count", Integer))


def test_duplicates_are_renamed_then_refused(empty_database: TestDatabase) -> None:
    engine: Engine = create_engine(empty_database.url)
    try:
        upgrade(engine, "0013")
        with engine.begin() as conn:
            conn.execute(insert(V0013), BEFORE)
        upgrade(engine)
        with engine.connect() as conn:
            names = {row.id: row.name for row in conn.execute(select(api_tokens.c.id, api_tokens.c.name))}
            conn.rollback()
        assert names == AFTER
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert(api_tokens), _token("9", "ci (2)", 9, revoked_at=9))
        with engine.begin() as conn:  # the same name for another user, a name differing in case
            conn.execute(insert(api_tokens), [_token("10", "solo", 10, username="grafana"), _token("11", "CI", 11)])
    finally:
        close_engine(engine)

