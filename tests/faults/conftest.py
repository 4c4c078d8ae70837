"""Fixtures of the fault suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def events(tmp_path: Path) -> Path:
    """The file every node of the test appends its events and effects to (JSON lines)."""
    return tmp_path / "events.jsonl"


