"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from scheduler_core.db import close_engine, create_engine
from tests.conftest import TestDatabase


@pytest.fixture
def events(tmp_path: Path) -> Path:
    """The file every node of the test appends its events and effects to (JSON lines)."""
    return tmp_path / "events.jsonl"


@pytest.fixture
def server_engine(server_database: TestDatabase) -> Iterator[Engine]:
    """An engine on ``server_database`` (PostgreSQL or MariaDB, a fresh migrated database)."""
    engine = create_engine(server_database.url)
    try:
        yield engine
    finally:
        close_engine(engine)
